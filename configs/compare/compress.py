"""The compression grid: smaller BERTs beside the teacher they shrink.

    python -m zoo.compare --config configs/compare/compress.py --workdir DIR

A BERT teacher pre-trained by MLM (`TEACHER`: 4 layers x 128, a "mini"
BERT that 2 CPU cores pre-train in minutes; `teacher=small` makes it
BERT-small, 4 x 512), and seven ways to a smaller or cheaper model, every
pre-trained row on the demo's token budget and rows:

- distil: DistilBERT-style, half the teacher's layers, started from every
  other layer of it, soft targets + MLM + hidden cosine (`distil`);
- tinybert: TinyBERT-style, half the layers at half the width, learning the
  teacher's embeddings, layers and attention (`tinybert`); its
  prediction-layer loss is on (`pred_weight` 1, the paper's task stage)
  so that its MLM head, which the minimal-pairs view reads, is trained;
- mobilebert: the MobileBERT architecture (bottlenecks, stacked FFNs,
  NoNorm) at the teacher's depth, pre-trained by MLM (the paper distils it
  from an inverted-bottleneck teacher this grid does not have);
- albert: ALBERT (shared layers, factorised embeddings) by MLM + SOP;
- int8: the teacher, post-training quantised (Q8BERT int8, calibrated);
- pruned50, pruned90: the teacher's architecture pre-trained with gradual
  magnitude pruning to 50% and 90% zeros (Zhu & Gupta), held while it
  fine-tunes.

The two students are also read beside a random init of their own shape
(`random_distil`, `random_tinybert`): compared with the teacher-shaped
`random_bert`, a probe or a fine-tuning run would credit or blame
pre-training for what is the width and depth.

Every row is read by the demo's three views; the compression table
(`compare_to`) gives parameters, bytes on disk, CPU latency at batch
1 x 128 and each view's paired difference from the teacher.
"""

from configs.compare import demo
from zoo.harness import cells as cells_lib

# Every BERT-shaped row reads trigram input (`trigram_input`, as the demo's
# MLM row does): plain tiny BERTs stay on the unigram plateau at this
# budget, where no view can tell the rows apart (README, "plateau").
TEACHERS = {
    "mini": dict(num_layers=4, embed_dim=128, num_heads=4, mlp_dim=512,
                 trigram_input=True),
    "small": dict(num_layers=4, embed_dim=512, num_heads=8, mlp_dim=2048,
                  trigram_input=True),
}


def _prune(target: float, steps: int) -> dict:
  """Zhu & Gupta's schedule: from 10% to 70% of the steps, 20 updates."""
  begin, end = steps // 10, max(steps // 10 + 1, 7 * steps // 10)
  return {"prune": dict(target=target, begin_step=begin, end_step=end,
                        frequency=max(1, (end - begin) // 20))}


def cells(teacher: dict, steps: int) -> list[dict]:
  """The grid's rows for a teacher shape and the budget's steps."""
  half = max(1, teacher["num_layers"] // 2)
  width = teacher["embed_dim"] // 2
  narrow = dict(teacher, num_layers=half, embed_dim=width,
                mlp_dim=teacher["mlp_dim"] // 2)
  mobile = dict(num_layers=teacher["num_layers"],
                embed_dim=teacher["embed_dim"],
                intra_dim=teacher["embed_dim"] // 2,
                embedding_dim=teacher["embed_dim"] // 2,
                num_heads=teacher["num_heads"],
                mlp_dim=teacher["embed_dim"])
  shared = dict(teacher, embedding_dim=teacher["embed_dim"] // 2)
  return [
      dict(name="teacher", objective="mlm", model="bert",
           model_args=teacher),
      dict(name="distil", objective="distil", model="bert",
           model_args=dict(teacher, num_layers=half),
           objective_args={"teacher": "@teacher"},
           random_row="random_distil"),
      dict(name="tinybert", objective="tinybert", model="bert",
           model_args=narrow,
           objective_args={"teacher": "@teacher", "pred_weight": 1.0},
           random_row="random_tinybert"),
      dict(name="mobilebert", objective="mlm", model="mobilebert",
           model_args=mobile),
      dict(name="albert", objective="sop", model="albert",
           model_args=shared),
      dict(name="int8", model="bert", source="teacher", quant="int8",
           model_args=teacher),
      dict(name="pruned50", objective="mlm", model="bert",
           model_args=teacher, optimizer=_prune(0.5, steps)),
      dict(name="pruned90", objective="mlm", model="bert",
           model_args=teacher, optimizer=_prune(0.9, steps)),
  ]


def get_config(arg: str | None = None):
  """The grid; `arg` takes the demo's `tokens=N`, `ft_steps=N`, `k=N`,
  `ft_lr=X` (few-shot fine-tuning's rate), `teacher=mini|small` and
  `lr=X`, the peak pre-training rate of every pre-trained row (default
  the demo's)."""
  args = dict(p.split("=", 1) for p in (arg or "").split(",") if p)
  name = args.pop("teacher", "mini")
  if name not in TEACHERS:
    raise ValueError(f"teacher={name!r}: the teachers are {sorted(TEACHERS)}")
  teacher = TEACHERS[name]
  lr = args.pop("lr", None)
  g = demo.grid([], **demo.parse(",".join(f"{k}={v}"
                                          for k, v in args.items())))
  g.cells = cells(teacher, cells_lib.budget_steps(g))
  if lr is not None:
    for cell in g.cells:
      if "objective" in cell:
        cell["optimizer"] = dict(cell.get("optimizer", {}), lr=float(lr))
  g.compare_to = "teacher"
  return g
