"""elmo pre-trained with the bilm objective.

Forward and backward LMs.

    python -m zoo.train --config configs/elmo_bilm.py:tiny --workdir /tmp/run
"""

from configs import common


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.base_config()
  c.model = "elmo"
  c.objective = "bilm"
  return common.finish(c, arg)
