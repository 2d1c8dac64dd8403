"""The config a workdir was written with: continue training it.

    python -m zoo.train --config configs/workdir.py:WORKDIR \\
        --workdir WORKDIR --config.steps=2000

`WORKDIR` is a run's workdir or one made by `zoo.convert.workdir` from a
Hugging Face folder. Its `config.json` is read over `base_config()`, so every
field keeps its default's type and `--config.KEY=VALUE` overrides parse as
they do for any config (a float written as `1` stays a float; an int field
saved as null keeps its int type).
"""

import ml_collections

from configs import common
from zoo import checkpoint

# Blocks whose keys are free (a scheme's options, a family's Config fields,
# mesh axes): taken as saved, with JSON's types.
_OPEN_BLOCKS = ("model_args", "objective_args", "mesh")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """The ConfigDict of `arg`'s `config.json`; `arg` is the workdir path."""
  if not arg:
    raise ValueError("configs/workdir.py needs the workdir: "
                     "--config configs/workdir.py:PATH")
  saved = checkpoint.read_config(arg)
  c = common.base_config()
  for key, value in saved.items():
    if key in _OPEN_BLOCKS:
      c[key] = ml_collections.ConfigDict(value or {})
    elif key == "rules":
      c.rules = tuple((name, tuple(t) if isinstance(t, list) else t)
                      for name, t in value)
    elif key in ("data", "optimizer"):
      for field, v in value.items():
        _set(c[key], field, v, f"{key}.{field}")
    else:
      _set(c, key, value, key)
  return c


def _set(block: ml_collections.ConfigDict, key: str, value, name: str):
  """`block[key] = value` typed as the default (ints stand for floats)."""
  if key not in block:
    raise ValueError(f"config.json field {name!r} is not a config key; was "
                     "the workdir written by another version of the zoo?")
  default = block[key]
  if isinstance(default, float) and isinstance(value, int) and not (
      isinstance(value, bool)):
    value = float(value)
  block[key] = value
