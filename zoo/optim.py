"""The optimizer of the one trainer: AdamW or SGD, a schedule, clipping.

Config (`config.optimizer`):
  name: "adamw" (default) or "sgd" (plain SGD on the configured rate, no
    momentum: word2vec's and fastText's update; b1, b2 and eps unused).
  lr: peak learning rate.
  warmup_steps: linear warmup from 0 to `lr`.
  decay: "linear", "cosine" or "constant" after the warmup.
  decay_steps: where the decay ends (-1: `config.steps`).
  end_lr_ratio: the learning rate at the end, as a fraction of `lr`.
  b1, b2, eps, weight_decay: AdamW's; no decay on vectors (biases, norms).
    Under SGD `weight_decay` is decoupled too: the rate times the decay
    times the param, matrices only.
  clip_norm: global gradient norm clip (0 or less: none).
  prune: optional block, gradual magnitude pruning around all of the above
    (`zoo.compress.magnitude`; fields in `zoo.config.prune`). Absent or
    `target` 0: no pruning and the optimizer state of a run without it.
"""

import jax
import optax

from zoo.compress import magnitude

_DECAYS = ("linear", "cosine", "constant")
NAMES = ("adamw", "sgd")


def schedule(opt_cfg, steps: int) -> optax.Schedule:
  """Learning rate as a function of the int32 step count."""
  lr = float(opt_cfg.lr)
  warmup = int(opt_cfg.warmup_steps)
  total = int(opt_cfg.get("decay_steps", -1))
  total = steps if total < 0 else total
  end = lr * float(opt_cfg.get("end_lr_ratio", 0.0))
  decay = opt_cfg.get("decay", "linear")
  if decay not in _DECAYS:
    raise ValueError(f"optimizer.decay {decay!r} is not one of {_DECAYS}")
  rest = max(total - warmup, 1)
  if decay == "linear":
    after = optax.linear_schedule(lr, end, rest)
  elif decay == "cosine":
    after = optax.cosine_decay_schedule(lr, rest, alpha=end / lr if lr else 0)
  else:
    after = optax.constant_schedule(lr)
  if warmup <= 0:
    return after
  return optax.join_schedules(
      [optax.linear_schedule(0.0, lr, warmup), after], [warmup])


def decay_mask(params):
  """Where weight decay applies: matrices only (biases, norm scales and
  gains stay free)."""
  return jax.tree_util.tree_map(lambda p: p.ndim > 1, params)


def make(opt_cfg, steps: int) -> optax.GradientTransformation:
  """The configured optimizer with clipping and its schedule.

  Args:
    opt_cfg: the `config.optimizer` ConfigDict (fields above).
    steps: the run's total number of steps.

  Returns:
    An optax transformation over float32 params of any tree (its update
    needs params when `prune` is on).
  """
  name = opt_cfg.get("name", "adamw")
  if name not in NAMES:
    raise ValueError(f"optimizer.name {name!r} is not one of {NAMES}")
  parts = []
  clip = float(opt_cfg.get("clip_norm", 0.0))
  if clip > 0:
    parts.append(optax.clip_by_global_norm(clip))
  rate = schedule(opt_cfg, steps)
  decay = float(opt_cfg.get("weight_decay", 0.01))
  if name == "adamw":
    parts.append(optax.adamw(
        rate, b1=float(opt_cfg.get("b1", 0.9)),
        b2=float(opt_cfg.get("b2", 0.999)),
        eps=float(opt_cfg.get("eps", 1e-8)), weight_decay=decay,
        mask=decay_mask))
  else:
    if decay:
      parts.append(optax.add_decayed_weights(decay, mask=decay_mask))
    parts.append(optax.sgd(rate))
  tx = optax.chain(*parts)
  prune = magnitude.from_block(opt_cfg.get("prune"))
  return tx if prune is None else magnitude.prune(tx, prune)


def freeze(tx: optax.GradientTransformation, keys
           ) -> optax.GradientTransformation:
  """`tx` on every top-level params key but `keys`, whose updates are zero.

  Args:
    tx: the transformation of the trained params.
    keys: top-level keys of the params dict never trained
      (`Objective.frozen`); empty: `tx` itself.

  Returns:
    A transformation over the whole params dict; the frozen subtrees keep
    no optimizer state, and `params + 0` leaves them bitwise as they were.
  """
  keys = tuple(keys)
  if not keys:
    return tx
  labels = lambda params: {k: "frozen" if k in keys else "train"
                           for k in params}
  return optax.multi_transform({"train": tx, "frozen": optax.set_to_zero()},
                               labels)
