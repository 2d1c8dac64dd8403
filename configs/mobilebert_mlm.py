"""mobilebert pre-trained with the mlm objective.

MobileBERT: a 24-layer BERT of bottlenecked blocks (512 between blocks,
128 inside, 4 stacked FFNs, NoNorm, trigram embeddings of width 128). The
paper pre-trains it by masked LM while distilling from an inverted-
bottleneck teacher; here it is the plain `mlm` scheme (no teacher). Its
base size scans its 24 layers:

    python -m zoo.train --config configs/mobilebert_mlm.py:tiny --workdir /tmp/mobilebert_mlm
    python -m zoo.train --config configs/mobilebert_mlm.py:size=base --workdir DIR
"""

from configs import common


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.base_config()
  c.model = "mobilebert"
  c.objective = "mlm"
  return common.finish(c, arg)
