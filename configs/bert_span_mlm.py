"""bert pre-trained with the span_mlm objective.

SpanBERT: geometric spans and the SBO.

    python -m zoo.train --config configs/bert_span_mlm.py:tiny --workdir /tmp/run
"""

from configs import common


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.base_config()
  c.model = "bert"
  c.objective = "span_mlm"
  return common.finish(c, arg)
