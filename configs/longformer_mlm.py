"""longformer pre-trained with the mlm objective.

Longformer: RoBERTa's masked LM with sliding-window attention. The tiny
size's window is 16, so its 64-piece rows cross several windows; the
paper's rows are 4,096 pieces (8 windows of 512):

    python -m zoo.train --config configs/longformer_mlm.py:tiny --workdir /tmp/longformer_mlm
    python -m zoo.train --config configs/longformer_mlm.py:size=base,seq_len=4096 --workdir DIR
"""

from configs import common


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.base_config()
  c.model = "longformer"
  c.objective = "mlm"
  return common.finish(c, arg)
