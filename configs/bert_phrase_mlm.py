"""bert pre-trained with the phrase_mlm objective.

ERNIE-style phrase and entity masking.

    python -m zoo.train --config configs/bert_phrase_mlm.py:tiny --workdir /tmp/run
"""

from configs import common


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.base_config()
  c.model = "bert"
  c.objective = "phrase_mlm"
  return common.finish(c, arg)
