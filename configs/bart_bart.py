"""bart pre-trained with the bart objective.

Text infilling + sentence permutation.

    python -m zoo.train --config configs/bart_bart.py:tiny --workdir /tmp/run
"""

from configs import common


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.base_config()
  c.model = "bart"
  c.objective = "bart"
  c.objective_args.noises = ("infill", "permute")
  c.objective_args.rate = 0.3
  return common.finish(c, arg)
