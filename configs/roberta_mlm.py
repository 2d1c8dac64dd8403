"""roberta pre-trained with the mlm objective.

RoBERTa: dynamic masking, no NSP.

    python -m zoo.train --config configs/roberta_mlm.py:tiny --workdir /tmp/run
"""

from configs import common


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.base_config()
  c.model = "roberta"
  c.objective = "mlm"
  return common.finish(c, arg)
