"""The demo grid: six tiny schemes, three tasks, three seeds, on 2 CPUs.

    python -m zoo.compare --config configs/compare/demo.py --workdir DIR
    make demo

Every cell pre-trains a tiny model on the embedded sample corpus for the
same token budget (`steps * batch_size * seq_len`), then each is
fine-tuned with one recipe on three classification tasks (SMS spam, BBC
topic, TREC question type), three seeds each,
next to a randomly initialised BERT ("no pre-training", as in T5's Table 1).

The recipe: full fine-tuning, 270 AdamW steps of 16 rows at lr 2e-3, inputs
cut to 64 pieces, encoders read by a mean-pooled head (the [cls] state of an
encoder pre-trained without NSP carries little after a short run), and
encoder-decoders and decoders generate the label word (at most 8 pieces),
scored on the first 100 validation examples.
"""

import ml_collections

from configs import common

TASKS = ("sms_spam", "bbc_topic", "trec")
SEEDS = (0, 1, 2)
# Fine-tuning steps: a tiny T5 or BART needs ~250 steps before its generated
# label starts to depend on the input (fewer leave it emitting one label).
FT_STEPS = 270
# Pre-training steps of every cell (16 x 64 tokens each).
PRETRAIN_STEPS = 120

# (name, objective, model family, T5 row it mirrors); "" = no pre-training.
CELLS = (
    ("no_pretraining", "", "bert", ""),
    ("mlm", "mlm", "bert", ""),
    ("clm", "clm", "gpt2", ""),
    ("t5_span", "t5_span", "t5", "table7/span_3"),
    ("electra", "electra", "electra", ""),
    ("bart", "bart", "bart", ""),
)


def pretrain(steps: int = PRETRAIN_STEPS) -> ml_collections.ConfigDict:
  """The training config every cell shares (only the scheme differs)."""
  c = common.base_config()
  c.size = "tiny"
  c.steps = steps
  c.batch_size = 16
  c.seq_len = 64
  c.optimizer.lr = 1e-3
  c.optimizer.warmup_steps = max(1, steps // 10)
  c.checkpoint_every = 50
  c.keep_checkpoints = 2
  c.log_every = 10
  c.eval_every = 0
  c.eval_steps = 0  # the downstream tasks are the evaluation
  return c


def recipe(steps: int = FT_STEPS) -> ml_collections.ConfigDict:
  """The one fine-tuning recipe (keyword arguments of `finetune`)."""
  return ml_collections.ConfigDict(dict(
      mode="full", steps=steps, batch_size=16, lr=2e-3, max_len=64,
      max_target_len=8, pool="mean", eval_limit=100,
      splits=("validation",)))


def grid(cells, tasks=TASKS, seeds=SEEDS,
         pretrain_steps: int = PRETRAIN_STEPS,
         finetune_steps: int = FT_STEPS) -> ml_collections.ConfigDict:
  """A grid of `(name, objective, model, t5_row)` cells over one recipe."""
  from configs.compare import t5_tables  # pylint: disable=import-outside-toplevel
  g = ml_collections.ConfigDict()
  g.pretrain = pretrain(pretrain_steps)
  g.cells = [dict(name=n, objective=o, model=m, t5_row=r)
             for n, o, m, r in cells]
  g.tasks = list(tasks)
  g.seeds = list(seeds)
  g.finetune = recipe(finetune_steps)
  g.report_split = "validation"
  g.published = {r: t5_tables.PUBLISHED[r] for *_, r in cells if r}
  return g


def get_config(arg: str | None = None):
  """The demo grid; `arg` may set `steps=N` (pre-training) or `ft_steps=N`."""
  args = common.parse_arg(arg)
  unknown = set(args) - {"steps", "ft_steps"}
  if unknown:
    raise ValueError(f"demo grid arguments are steps= and ft_steps=; got "
                     f"{sorted(unknown)}")
  return grid(CELLS, pretrain_steps=int(args.get("steps", PRETRAIN_STEPS)),
              finetune_steps=int(args.get("ft_steps", FT_STEPS)))
