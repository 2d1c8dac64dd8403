"""t5 pre-trained with the t5_bert objective.

BERT-style corruption, reconstruct the original.

    python -m zoo.train --config configs/t5_bert.py:tiny --workdir /tmp/run
"""

from configs import common


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.base_config()
  c.model = "t5"
  c.objective = "t5_bert"
  return common.finish(c, arg)
