"""bert pre-trained with the wwm objective.

Whole-word masking.

    python -m zoo.train --config configs/bert_wwm.py:tiny --workdir /tmp/run
"""

from configs import common


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.base_config()
  c.model = "bert"
  c.objective = "wwm"
  return common.finish(c, arg)
