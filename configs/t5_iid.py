"""t5 pre-trained with the t5_iid objective.

I.i.d. noise, spans of noise become sentinels.

    python -m zoo.train --config configs/t5_iid.py:tiny --workdir /tmp/run
"""

from configs import common


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.base_config()
  c.model = "t5"
  c.objective = "t5_iid"
  c.objective_args.density = 0.15
  return common.finish(c, arg)
