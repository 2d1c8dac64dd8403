"""ERNIE (Tsinghua) pre-trained by MLM and the denoising entity
auto-encoder, with WordNet's nouns linked in the text (`data.entities`)
and their TransE vectors (trained on first use, then cached).

    python -m zoo.train --config configs/ernie_ernie.py:tiny --workdir /tmp/ernie
"""

from configs import common


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.base_config()
  c.model = "ernie"
  c.objective = "ernie"
  c.data.entities = "wordnet"
  return common.finish(c, arg)
