"""The keys every training config has, with their defaults.

A config file builds on `base_config()` and overrides what its scheme
needs; `get_config("tiny")` variants run on a laptop CPU in seconds.
"""

import ml_collections

from zoo.config import base_config, optimizer  # pylint: disable=unused-import


def parse_arg(arg: str | None) -> dict[str, str]:
  """`"tiny"` or `"size=base,steps=10"` -> a dict; a bare word is `size`."""
  out = {}
  for part in filter(None, (arg or "").split(",")):
    key, sep, value = part.partition("=")
    out[key.strip() if sep else "size"] = (value if sep else key).strip()
  return out


def tiny(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """Shrinks a config to a seconds-long local run."""
  c.size = "tiny"
  c.steps = 20
  c.batch_size = 8
  c.seq_len = 64
  c.optimizer.warmup_steps = 5
  c.checkpoint_every = 10
  c.log_every = 5
  c.eval_every = 10
  c.eval_steps = 2
  return c


def static(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """word2vec's recipe on the sample's rows: 100-d vectors (`small`),
  window 5, 5 noise pieces, subsampling at 1e-3 (the scheme's defaults),
  and 5 passes over the sample's 1.9M training pieces (18,800 steps of
  4 x 128), trained as word2vec.c, fastText and gensim train: plain SGD
  at 0.025 per pair (`reduction="sum"`), decaying linearly to 0.0001,
  each averaged vector taking the whole error (`mean_update="release"`:
  CBOW's context rows, FastText's n-gram rows). Four rows a step keep
  the batch's summed update close to word2vec's one pair at a time (at 32
  rows SGD at this rate diverges: frequent noise pieces gather hundreds
  of pair updates in one step). The argument
  `objective_args.reduction=mean` with the flags
  `--config.optimizer.name=adamw --config.optimizer.lr=0.05` trains the
  mean loss by Adam instead."""
  c.size = "small"
  c.steps = 18_800
  c.batch_size = 4
  c.seq_len = 128
  c.optimizer.name = "sgd"
  c.optimizer.lr = 0.025
  c.optimizer.end_lr_ratio = 0.0001 / 0.025
  c.optimizer.warmup_steps = 0
  c.optimizer.weight_decay = 0.0
  c.optimizer.clip_norm = 0.0
  c.checkpoint_every = 4000
  c.log_every = 400
  c.eval_every = 0
  c.objective_args.reduction = "sum"
  c.model_args.mean_update = "release"
  return c


def finish(c: ml_collections.ConfigDict, arg: str | None
           ) -> ml_collections.ConfigDict:
  """Applies an argument string: `tiny` or `size=...`, then `key=value`s.

  `model_args.FIELD=value` sets a field of the model family's Config
  (e.g. `size=large,model_args.scan_layers=true`), typed as its default;
  `objective_args.FIELD=value` one the config file set
  (`objective_args.teacher=workdirs/bert`); `BLOCK.KEY=value` a key of a
  block (`optimizer.lr=1e-3`, `data.source=speech`).
  """
  args = parse_arg(arg)
  size = args.pop("size", None)
  if size == "tiny":
    tiny(c)
  elif size:
    c.size = size
  for key, value in args.items():
    if key.startswith("model_args."):
      field = key.split(".", 1)[1]
      c.model_args[field] = typed(key, _model_default(c.model, field), value)
      continue
    if key.startswith("objective_args."):
      field = key.split(".", 1)[1]
      if field not in c.objective_args:
        raise ValueError(f"config argument {key!r}: the config sets no "
                         f"objective_args.{field}; it sets "
                         f"{sorted(c.objective_args)}")
      c.objective_args[field] = typed(key, c.objective_args[field], value)
      continue
    block, dot, field = key.partition(".")
    if dot and isinstance(c.get(block), ml_collections.ConfigDict):
      if field not in c[block]:
        raise ValueError(f"config argument {key!r}: {block} has no key "
                         f"{field!r}; keys: {sorted(c[block])}")
      c[block][field] = typed(key, c[block][field], value)
      continue
    if key not in c:
      raise ValueError(f"config argument {key!r} is not a config key")
    c[key] = typed(key, c[key], value)
  return c


_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def typed(key: str, default, value: str):
  """`value` (text) as the type of the field's `default`.

  Booleans read true/false/1/0/yes/no/on/off; ints take "12" or "1e6"
  (a whole number); "none"/"null" clears a field whose default is None,
  and any other text there becomes an int, float or string, whichever
  reads first.

  Raises:
    ValueError: the text is not a value of the field's type (the message
      names the field).
  """
  text = value.strip()
  low = text.lower()
  try:
    if isinstance(default, bool):
      if low not in _TRUE + _FALSE:
        raise ValueError("not a boolean")
      return low in _TRUE
    if isinstance(default, int):
      number = float(text)
      if number != int(number):
        raise ValueError("not a whole number")
      return int(number)
    if isinstance(default, float):
      return float(text)
    if default is None:
      return None if low in ("none", "null") else _guess(text)
    if isinstance(default, str):
      return text
  except (ValueError, OverflowError) as e:
    raise ValueError(f"config argument {key}={value!r}: {e}; the field "
                     f"holds a {type(default).__name__} "
                     f"(default {default!r})") from None
  raise ValueError(f"config argument {key!r} holds a "
                   f"{type(default).__name__}, which cannot be set from "
                   "text; set it in the config file")


def _guess(text: str):
  for kind in (int, float):
    try:
      return kind(text)
    except ValueError:
      pass
  return text


def _model_default(family: str, field: str):
  """The default of a model family's Config field (an error names it)."""
  import dataclasses  # pylint: disable=import-outside-toplevel
  from zoo import models  # pylint: disable=import-outside-toplevel
  fields = {f.name: f.default for f in dataclasses.fields(
      models.get(family).Config)}
  if field not in fields:
    raise ValueError(f"model_args.{field} is not a field of {family}'s "
                     f"Config; fields: {sorted(fields)}")
  return fields[field]
