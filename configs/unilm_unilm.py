"""unilm pre-trained with the unilm objective.

Bidirectional, left-to-right and seq2seq masks.

    python -m zoo.train --config configs/unilm_unilm.py:tiny --workdir /tmp/run
"""

from configs import common


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.base_config()
  c.model = "unilm"
  c.objective = "unilm"
  return common.finish(c, arg)
