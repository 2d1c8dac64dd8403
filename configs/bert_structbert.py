"""bert pre-trained with the structbert objective.

MLM plus the next/previous/random task.

    python -m zoo.train --config configs/bert_structbert.py:tiny --workdir /tmp/run
"""

from configs import common


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.base_config()
  c.model = "bert"
  c.objective = "structbert"
  return common.finish(c, arg)
