"""t5 pre-trained with T5 span corruption (the `t5_span` objective).

    python -m zoo.train --config configs/t5_span.py:tiny --workdir /tmp/t5_span
"""

from configs import common


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.base_config()
  c.model = "t5"
  c.objective = "t5_span"
  return common.finish(c, arg)
