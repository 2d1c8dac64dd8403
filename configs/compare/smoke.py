"""A two-cell, one-task grid that runs end to end in a minute (tests).

    python -m zoo.compare --config configs/compare/smoke.py --workdir DIR
"""

from configs.compare import demo


def get_config(arg: str | None = None):
  """MLM-pre-trained vs randomly initialised tiny BERT on TREC, 2 seeds."""
  del arg
  g = demo.grid((("mlm", "mlm", "bert", ""),
                 ("no_pretraining", "", "bert", "table1/no_pretraining")),
                tasks=("trec",), seeds=(0, 1), pretrain_steps=8,
                finetune_steps=12)
  g.pretrain.batch_size = 8
  g.pretrain.checkpoint_every = 2
  g.pretrain.log_every = 2
  g.pretrain.optimizer.warmup_steps = 2
  g.finetune.batch_size = 16
  g.finetune.eval_limit = 48
  return g
