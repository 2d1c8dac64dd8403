"""Grover: a GPT-2 pre-trained over the BBC articles' fields (topic,
headline, body), laid out at random every step (`objectives.grover`).

    python -m zoo.train --config configs/gpt2_grover.py:tiny --workdir /tmp/grover
"""

from configs import common


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.base_config()
  c.model = "gpt2"
  c.objective = "grover"
  c.data.source = "articles"
  c.objective_args.rule = "paper"
  return common.finish(c, arg)
