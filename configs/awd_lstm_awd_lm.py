"""AWD-LSTM pre-trained as ULMFiT's language model (`awd_lm`: next-token
prediction with AR and TAR).

    python -m zoo.train --config configs/awd_lstm_awd_lm.py:tiny --workdir /tmp/awd
"""

from configs import common


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.base_config()
  c.model = "awd_lstm"
  c.objective = "awd_lm"
  return common.finish(c, arg)
