"""A two-family, one-task grid that runs end to end in a minute (tests).

    python -m zoo.compare --config configs/compare/smoke.py --workdir DIR
    python -m zoo.compare --config configs/compare/smoke.py:only=mlm ...
"""

from configs.compare import demo


def get_config(arg: str | None = None):
  """MLM-pre-trained BERT and CLM-pre-trained GPT-2 beside their random-init
  rows, on TREC, 2 few-shot sets; every view, tiny budgets. `arg` may be
  `only=mlm` or `only=clm` (one cell and its random init)."""
  only, rest = demo.split_only(arg)
  if rest:
    raise ValueError(f"the smoke grid takes only= alone; got {rest!r}")
  g = demo.grid((("mlm", "mlm", "bert", ""), ("clm", "clm", "gpt2", "")),
                tasks=("trec",), seeds=(0, 1), budget=8 * 8 * 64,
                ft_steps=6, k=4)
  g.pretrain.batch_size = 8
  g.pretrain.data.vocab_size = 8000  # the tokenizer `make data` builds
  g.pretrain.seq_len = 64
  g.pretrain.checkpoint_every = 2
  g.pretrain.log_every = 2
  g.pretrain.optimizer.warmup_steps = 2
  g.minimal_pairs.n = 40
  g.probe.max_len = 32
  g.few_shot.max_len = 32
  return demo.select(g, only)
