"""gpt2 pre-trained with the clm objective.

    python -m zoo.train --config configs/gpt2_clm.py:tiny --workdir /tmp/gpt2_clm
"""

from configs import common
from objectives import lm


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.base_config()
  c.model = "gpt2"
  c.objective = "clm"
  # The head and loss C positions at a time (`objectives.head_loss`): the
  # same loss, faster on CPU (`bench/head_loss.py`); 0 = the whole logits.
  c.objective_args.head_chunk = lm.HEAD_CHUNK
  return common.finish(c, arg)
