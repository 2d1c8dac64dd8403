"""transfo_xl pre-trained with the clm objective.

    python -m zoo.train --config configs/transfo_xl_clm.py:tiny \
        --workdir /tmp/transfo_xl_clm

Each row is one segment, read with mems=None: a plain causal LM (no
memory is carried across training steps yet).
"""

from configs import common


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.base_config()
  c.model = "transfo_xl"
  c.objective = "clm"
  return common.finish(c, arg)
