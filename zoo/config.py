"""The training config: its keys, their defaults and types, and the one
frozen view the trainer reads (`complete`).

Config files (`configs/*.py`) build on `base_config()` and override what
their scheme needs.
"""

import ml_collections

from data import config as data_config
from zoo.sharding import DEFAULT_RULES


def base_config() -> ml_collections.ConfigDict:
  """A ConfigDict with every top-level key the trainer reads."""
  c = ml_collections.ConfigDict()
  c.model = "bert"              # model family (zoo.models.FAMILIES)
  c.size = "tiny"               # named size of the family's SIZES table
  c.objective = "mlm"           # pre-training scheme (objectives.names())
  c.objective_args = ml_collections.ConfigDict()  # scheme options (rates...)
  c.model_args = ml_collections.ConfigDict()  # model Config overrides (dtype)

  # The data block (data/config.py documents each field): source "sample",
  # "c4", "tfds" or "synthetic"; the tokenizer and its vocab_size.
  c.data = data_config.default_config()

  c.steps = 1000                # optimizer updates in the run
  c.batch_size = 32             # global rows per update, over all processes
  c.seq_len = 128               # tokens per packed row
  c.seed = 0                    # params, dropout and corruption rngs
  c.microbatches = 1            # gradient accumulation: batch_size/k per pass

  c.mesh = ml_collections.ConfigDict({"data": -1, "fsdp": 1, "tensor": 1})
  c.rules = DEFAULT_RULES       # (logical axis, mesh axes or None) pairs

  c.optimizer = optimizer()

  c.checkpoint_every = 500      # steps between async checkpoints
  c.keep_checkpoints = 3        # how many recent checkpoints stay on disk
  c.log_every = 50              # steps between metrics.jsonl lines
  c.eval_every = 500            # steps between validation passes; 0: end only
  c.eval_steps = 10             # validation batches per pass; 0: no eval
  c.skip_nonfinite = False      # skip non-finite updates instead of stopping
  return c


# Keys a run must name; every other key takes `base_config`'s default.
REQUIRED = ("model", "objective", "steps", "batch_size", "seq_len")
_BLOCKS = ("data", "optimizer", "mesh")  # nested blocks filled key by key
# Sub-blocks a config may add to a block: absent, they stay absent (so
# configs, results fingerprinted from them and checkpoints of runs without
# them are unchanged); present, they are filled key by key from these
# defaults like the blocks above.
OPTIONAL_BLOCKS = {("optimizer", "prune"): lambda: prune()}


def complete(config) -> ml_collections.FrozenConfigDict:
  """The one typed, frozen view of a training config the trainer reads.

  Keys a config leaves out take `base_config`'s defaults (the only place
  defaults live), as do the missing fields of its `data`, `optimizer` and
  `mesh` blocks and of an `optimizer.prune` block it adds
  (`OPTIONAL_BLOCKS`); each value must have its default's type.

  Raises:
    ValueError: a required key is missing, a key is unknown, or a value
      does not have its field's type (the message names the field).
  """
  config = ml_collections.ConfigDict(config) if isinstance(config, dict) \
      else config
  missing = [k for k in REQUIRED if k not in config]
  if missing:
    raise ValueError(f"config lacks the keys {missing}")
  out = base_config()
  unknown = sorted(set(config.keys()) - set(out.keys()))
  if unknown:
    raise ValueError(f"unknown config keys {unknown}; keys: "
                     f"{sorted(out.keys())}")
  for key in config.keys():
    value = config[key]
    if key in _BLOCKS:
      _merge_block(key, out[key], value)
    else:
      out[key] = _checked(key, out[key], value)
  return ml_collections.FrozenConfigDict(out)


def _merge_block(name: str, into: ml_collections.ConfigDict, value) -> None:
  items = value.items() if hasattr(value, "items") else ()
  for key, v in items:
    optional = OPTIONAL_BLOCKS.get((name, key))
    if optional is not None:
      if v is not None:
        into[key] = optional()
        _merge_block(f"{name}.{key}", into[key], v)
      continue
    if name != "mesh" and key not in into:
      raise ValueError(f"unknown {name} key {key!r}; keys: "
                       f"{sorted(into.keys())}")
    into[key] = _checked(f"{name}.{key}", into[key], v) if key in into else v


def _checked(field: str, default, value):
  """`value` if it has `default`'s type (ints may stand for floats)."""
  if value is None or default is None:
    return value
  if isinstance(default, bool) or isinstance(value, bool):
    ok = isinstance(value, bool) and isinstance(default, bool)
  elif isinstance(default, float):
    ok = isinstance(value, (int, float))
    value = float(value) if ok else value
  elif isinstance(default, int):
    ok = isinstance(value, int) or (isinstance(value, float)
                                    and value.is_integer())
    value = int(value) if ok else value
  elif isinstance(default, str):
    ok = isinstance(value, str)
  else:
    ok = True  # blocks, rules, args: their consumers check them
  if not ok:
    raise ValueError(f"config field {field}={value!r} is a "
                     f"{type(value).__name__}; it holds a "
                     f"{type(default).__name__} (default {default!r})")
  return value


def optimizer() -> ml_collections.ConfigDict:
  """The `optimizer` block: AdamW (or SGD) with warmup, decay, clipping."""
  o = ml_collections.ConfigDict()
  o.name = "adamw"        # "adamw" or "sgd" (`zoo.optim.NAMES`)
  o.lr = 1e-3             # peak learning rate, after warmup
  o.warmup_steps = 100    # linear warmup from 0
  o.decay = "linear"      # "linear", "cosine" or "constant"
  o.decay_steps = -1      # end of the decay; -1: `steps`
  o.end_lr_ratio = 0.0    # final lr as a fraction of lr
  o.b1 = 0.9              # Adam first-moment decay
  o.b2 = 0.999            # Adam second-moment decay
  o.eps = 1e-6            # Adam denominator epsilon
  o.weight_decay = 0.01   # on matrices only
  o.clip_norm = 1.0       # global gradient norm clip; 0: none
  return o


def prune() -> ml_collections.ConfigDict:
  """The optional `optimizer.prune` block: gradual magnitude pruning
  (`zoo.compress.magnitude`; Zhu & Gupta 2017). Off unless `target` > 0;
  a config without the block trains, fingerprints and checkpoints as
  before. Add it as `c.optimizer.prune = prune()` in a config file (then
  `--config.optimizer.prune.target=0.5` works)."""
  p = ml_collections.ConfigDict()
  p.target = 0.0          # final fraction of zeros per matrix; 0: off
  p.initial = 0.0         # sparsity reached at begin_step
  p.begin_step = 0        # first mask update
  p.end_step = 1000       # last mask update; the target from there on
  p.frequency = 100       # steps between mask updates
  p.scope = "tensor"      # "tensor": per-matrix threshold; or "global"
  p.exclude = "embedding"  # comma-separated path substrings never pruned
  return p
