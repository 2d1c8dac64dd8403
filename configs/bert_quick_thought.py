"""bert pre-trained with the quick_thought objective.

Contrastive neighbour sentences.

    python -m zoo.train --config configs/bert_quick_thought.py:tiny --workdir /tmp/run
"""

from configs import common


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.base_config()
  c.model = "bert"
  c.objective = "quick_thought"
  return common.finish(c, arg)
