"""bert pre-trained with the prefix_lm objective.

A prefix-masked encoder.

    python -m zoo.train --config configs/bert_prefix_lm.py:tiny --workdir /tmp/run
"""

from configs import common


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.base_config()
  c.model = "bert"
  c.objective = "prefix_lm"
  return common.finish(c, arg)
