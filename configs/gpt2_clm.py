"""gpt2 pre-trained with the clm objective.

    python -m zoo.train --config configs/gpt2_clm.py:tiny --workdir /tmp/gpt2_clm
"""

from configs import common


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.base_config()
  c.model = "gpt2"
  c.objective = "clm"
  return common.finish(c, arg)
