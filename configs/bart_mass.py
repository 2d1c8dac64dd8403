"""bart pre-trained with the mass objective.

A masked fragment, decoded alone.

    python -m zoo.train --config configs/bart_mass.py:tiny --workdir /tmp/run
"""

from configs import common


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.base_config()
  c.model = "bart"
  c.objective = "mass"
  return common.finish(c, arg)
