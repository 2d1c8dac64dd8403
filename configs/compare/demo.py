"""The demo grid: what pre-training buys three tiny families, on 2 CPUs.

    python -m zoo.compare --config configs/compare/demo.py --workdir DIR
    make demo

Three schemes on their own families (BERT with trigram input by MLM, GPT-2
by causal LM, T5 by span corruption), each pre-trained on the embedded
sample for the same token budget (`BUDGET_TOKENS`, one and a half passes
over its training split with a 4k-piece tokenizer), and each family's
random-init row (the same model config, untrained). Every row is read
three ways:
zero-shot minimal pairs, a frozen linear probe, and few-shot fine-tuning
on three classification tasks (SMS spam, BBC topic, TREC question type),
three sampled training sets each.
"""

import ml_collections

from configs import common
from objectives import lm

TASKS = ("sms_spam", "bbc_topic", "trec")
SEEDS = (0, 1, 2)
# A 4k-piece tokenizer: tiny models spend most of a step on the vocabulary
# projection, and with 4k pieces a causal LM starts using its context within
# one pass (8k: after about two).
VOCAB = 4000
# Pre-training tokens per cell: one and a half passes over the sample's
# training split (1,927,941 tokens with the 4k tokenizer), so the demo stays
# within 15 minutes on a slow hour of a shared 2-core host.
BUDGET_TOKENS = 2_900_000
BATCH, SEQ_LEN = 32, 128
# Few-shot recipe: K examples per class, fine-tuning steps, peak rate.
K, FT_STEPS, FT_LR = 32, 60, 2e-3

# (name, objective, model family, T5 row it mirrors[, model Config
# overrides[, objective options]]). The MLM row's BERT embeds each piece
# beside its neighbours (`trigram_input`, MobileBERT's input layer): plain
# BERT stays on the unigram plateau for many passes at this size and
# budget, see `bench/learning_curve.py` and the README's findings. The
# causal LM runs its head and loss in chunks of positions, as
# `configs/gpt2_clm.py` does (the same loss, a faster step on CPU).
CELLS = (
    ("mlm", "mlm", "bert", "", dict(trigram_input=True)),
    ("clm", "clm", "gpt2", "", {}, dict(head_chunk=lm.HEAD_CHUNK)),
    ("t5_span", "t5_span", "t5", "table7/span_3"),
)


def pretrain() -> ml_collections.ConfigDict:
  """The training config every cell shares (only the scheme differs)."""
  c = common.base_config()
  c.size = "tiny"
  c.batch_size = BATCH
  c.seq_len = SEQ_LEN
  c.data.vocab_size = VOCAB
  c.optimizer.lr = 2e-3
  c.checkpoint_every = 200
  c.keep_checkpoints = 2
  c.log_every = 20
  c.eval_every = 0
  c.eval_steps = 0  # the views are the evaluation
  return c


def few_shot(steps: int = FT_STEPS, k: int = K, lr: float = FT_LR
             ) -> ml_collections.ConfigDict:
  """The one few-shot recipe: "k" and `zoo.finetune.finetune` arguments."""
  return ml_collections.ConfigDict(dict(
      k=k, mode="full", steps=steps, batch_size=16, lr=lr, max_len=64,
      max_target_len=8, pool="mean", scoring="rank"))


def grid(cells, tasks=TASKS, seeds=SEEDS, budget: int = BUDGET_TOKENS,
         ft_steps: int = FT_STEPS, k: int = K, ft_lr: float = FT_LR
         ) -> ml_collections.ConfigDict:
  """A grid of `(name, objective, model, t5_row[, model_args[,
  objective_args]])` cells over one recipe."""
  from configs.compare import t5_tables  # pylint: disable=import-outside-toplevel
  g = ml_collections.ConfigDict()
  g.pretrain = pretrain()
  steps = -(-budget // (BATCH * SEQ_LEN))
  g.pretrain.optimizer.warmup_steps = max(1, steps // 10)
  g.budget_tokens = budget
  g.cells = [dict(name=c[0], objective=c[1], model=c[2], t5_row=c[3],
                 **({"model_args": dict(c[4])} if len(c) > 4 else {}),
                 **({"objective_args": dict(c[5])} if len(c) > 5 else {}))
             for c in cells]
  g.tasks = list(tasks)
  g.seeds = list(seeds)
  g.minimal_pairs = ml_collections.ConfigDict(dict(n=300))
  g.probe = ml_collections.ConfigDict(dict(max_len=64))
  g.few_shot = few_shot(ft_steps, k, ft_lr)
  g.report_split = "validation"
  g.published = {c[3]: t5_tables.PUBLISHED[c[3]] for c in cells if c[3]}
  return g


def parse(arg: str | None) -> dict:
  """`tokens=N,ft_steps=N,k=N,ft_lr=X` of a grid argument, as keyword
  arguments (`ft_lr`: the few-shot fine-tuning's peak rate)."""
  args = common.parse_arg(arg)
  names = {"tokens": "budget", "ft_steps": "ft_steps", "k": "k",
           "ft_lr": "ft_lr"}
  unknown = set(args) - set(names)
  if unknown:
    raise ValueError(f"grid arguments are tokens=, ft_steps=, k= and ft_lr=;"
                     f" got {sorted(unknown)}")
  out = {}
  for key, value in args.items():
    try:
      out[names[key]] = (float(value) if key == "ft_lr"
                         else int(float(value)))
    except ValueError:
      raise ValueError(f"grid argument {key}={value!r} is not a number"
                       ) from None
  if out.get("ft_lr", 1.0) <= 0:
    raise ValueError(f"ft_lr={out['ft_lr']} must be positive")
  return out


def select(g: ml_collections.ConfigDict, only: str
           ) -> ml_collections.ConfigDict:
  """`g` with just the cells `only` names ("NAME+NAME..."; "" keeps all);
  their families' random-init rows come with them."""
  names = [n for n in only.split("+") if n]
  if names:
    known = [c["name"] for c in g.cells]
    unknown = sorted(set(names) - set(known))
    if unknown:
      raise ValueError(f"only= names cells {unknown} the grid lacks; its "
                       f"cells: {known}")
    g.cells = [c for c in g.cells if c["name"] in names]
    rows = {c.get("t5_row", "") for c in g.cells}
    g.published = {k: v for k, v in g.published.items() if k in rows}
  return g


def split_only(arg: str | None) -> tuple[str, str]:
  """`(only, the rest)` of a grid argument such as `tokens=N,only=mlm`."""
  args = common.parse_arg(arg)
  only = args.pop("only", "")
  return only, ",".join(f"{k}={v}" for k, v in args.items())


def get_config(arg: str | None = None):
  """The demo grid; `arg` may set `tokens=N`, `ft_steps=N`, `k=N`,
  `ft_lr=X`, and
  `only=NAME+NAME...` to run just those cells (with their random inits),
  e.g. `tokens=7700000,only=mlm`."""
  only, rest = split_only(arg)
  return select(grid(CELLS, **parse(rest)), only)
