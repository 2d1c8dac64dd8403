"""t5 pre-trained with the t5_prefix_lm objective.

Prefix LM.

    python -m zoo.train --config configs/t5_prefix_lm.py:tiny --workdir /tmp/run
"""

from configs import common


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.base_config()
  c.model = "t5"
  c.objective = "t5_prefix_lm"
  return common.finish(c, arg)
