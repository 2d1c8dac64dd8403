"""xlnet pre-trained with the plm objective (permutation language modelling).

    python -m zoo.train --config configs/xlnet_plm.py:tiny --workdir /tmp/xlnet_plm
"""

from configs import common


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.base_config()
  c.model = "xlnet"
  c.objective = "plm"
  return common.finish(c, arg)
