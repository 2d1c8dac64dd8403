"""t5 pre-trained with the t5_drop objective.

Drop corrupted tokens, predict them.

    python -m zoo.train --config configs/t5_drop.py:tiny --workdir /tmp/run
"""

from configs import common


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.base_config()
  c.model = "t5"
  c.objective = "t5_drop"
  return common.finish(c, arg)
