"""electra pre-trained with the electra objective.

Generator MLM + 50 x replaced-token detection.

    python -m zoo.train --config configs/electra_electra.py:tiny --workdir /tmp/run
"""

from configs import common


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.base_config()
  c.model = "electra"
  c.objective = "electra"
  return common.finish(c, arg)
