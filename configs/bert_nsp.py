"""bert pre-trained with the nsp objective.

BERT: MLM plus next-sentence prediction.

    python -m zoo.train --config configs/bert_nsp.py:tiny --workdir /tmp/run
"""

from configs import common


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.base_config()
  c.model = "bert"
  c.objective = "nsp"
  return common.finish(c, arg)
