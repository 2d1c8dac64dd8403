"""Skip-Thought pre-trained by generating each sentence's neighbours
(`skip_thought`: a GRU encoder, two conditioned GRU decoders).

    python -m zoo.train --config configs/skip_thought_skip_thought.py:tiny --workdir /tmp/st
"""

from configs import common


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.base_config()
  c.model = "skip_thought"
  c.objective = "skip_thought"
  return common.finish(c, arg)
