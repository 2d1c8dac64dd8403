"""CoVe's MT-LSTM pre-trained by attentional translation (`cove_mt`) on the
parallel sample: English sentences into French (`data.parallel`).

    python -m zoo.train --config configs/cove_cove_mt.py:tiny --workdir /tmp/cove
"""

from configs import common


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.base_config()
  c.model = "cove"
  c.objective = "cove_mt"
  c.data.source = "parallel"
  return common.finish(c, arg)
