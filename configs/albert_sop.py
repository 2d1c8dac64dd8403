"""albert pre-trained with the sop objective.

ALBERT: MLM plus sentence-order prediction.

    python -m zoo.train --config configs/albert_sop.py:tiny --workdir /tmp/run
"""

from configs import common


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.base_config()
  c.model = "albert"
  c.objective = "sop"
  return common.finish(c, arg)
