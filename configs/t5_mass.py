"""t5 pre-trained with the t5_mass objective.

MASS-style: every noised piece masked.

    python -m zoo.train --config configs/t5_mass.py:tiny --workdir /tmp/run
"""

from configs import common


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.base_config()
  c.model = "t5"
  c.objective = "t5_mass"
  return common.finish(c, arg)
