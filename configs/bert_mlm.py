"""bert pre-trained with the mlm objective.

    python -m zoo.train --config configs/bert_mlm.py:tiny --workdir /tmp/bert_mlm
"""

from configs import common


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.base_config()
  c.model = "bert"
  c.objective = "mlm"
  return common.finish(c, arg)
