"""ULMFiT's fine-tuning recipe, for any family's backbone.

Howard & Ruder 2018, "Universal language model fine-tuning for text
classification", section 3.2:

- layer groups: the backbone's params, bottom to top (`layer_groups`):
  the token layer is group 0, the stack's layer i group i + 1 (unrolled
  `layer_<i>`, `lstm_<i>`, `forward_<i>` ..., or slice i of a scanned
  `layers` stack), everything else of the backbone (final norms, pooler,
  LM heads) the group above the layers, and the task head the top group;
- discriminative fine-tuning: group g learns at lr / `factor`^(top - g)
  (the paper's 2.6);
- slanted triangular learning rates (`slanted_triangular`): a short linear
  rise to lr at `cut_frac` of the steps, then a long linear decay, from
  and to lr / `ratio`;
- gradual unfreezing: the top group trains from the first step, and every
  `unfreeze_every` steps the next group down joins; a group not yet
  unfrozen gets no gradient (its optimizer moments stay zero).

Letters: L layers of a scanned stack.
"""

import dataclasses
import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax

@dataclasses.dataclass(frozen=True)
class Recipe:
  """ULMFiT's fine-tuning options (`zoo.finetune.finetune(ulmfit=...)`).

  Attributes:
    layer_decay: each group below learns at the rate over this (1: off).
    unfreeze_every: steps between unfreezing groups (0: all train).
    slanted: the slanted triangular schedule instead of warmup + linear.
    cut_frac, ratio: its rise fraction and its lowest rate's divisor.
  """
  layer_decay: float = 2.6
  unfreeze_every: int = 0
  slanted: bool = True
  cut_frac: float = 0.1
  ratio: float = 32.0


_LAYER = re.compile(r"^(?:layer|lstm|forward|backward|block)_(\d+)$")
_TOKEN_LAYER = ("embed", "token", "position", "char")


def _group_of(keys: list[str], leaf, depth: int):
  """The group of one backbone leaf: an int, or int [L] for a scanned one."""
  for key in keys:
    found = _LAYER.match(key)
    if found:
      return int(found.group(1)) + 1
    if key == "layers":  # a scanned stack: slice i is layer i
      return np.arange(1, leaf.shape[0] + 1)
  if any(t in k.lower() for k in keys for t in _TOKEN_LAYER):
    return 0
  return depth + 1


def _depth(params) -> int:
  """L: the deepest layer index + 1 over unrolled and scanned stacks."""
  depth = 0
  for path, leaf in jax.tree_util.tree_leaves_with_path(params):
    for key in (getattr(p, "key", "") for p in path):
      found = _LAYER.match(str(key))
      if found:
        depth = max(depth, int(found.group(1)) + 1)
      elif key == "layers":
        depth = max(depth, leaf.shape[0])
  return depth


def layer_groups(params: dict) -> tuple[dict, int]:
  """Groups of a fine-tuning params tree `{"backbone": ..., "head": ...}`.

  Returns:
    (a tree like params of int groups, int [L] arrays for scanned leaves;
    the top group, the head's: L + 2).
  """
  depth = _depth(params["backbone"])
  top = depth + 2

  def group(path, leaf):
    keys = [str(getattr(p, "key", p)) for p in path]
    if keys[0] != "backbone":
      return top
    return _group_of(keys[1:], leaf, depth)
  return jax.tree_util.tree_map_with_path(group, params), top


def _per_leaf(groups, params, fn):
  """fn(group) as an array that broadcasts against each leaf."""
  def one(g, p):
    value = np.asarray(fn(np.asarray(g)), np.float32)
    return value.reshape(value.shape + (1,) * (p.ndim - value.ndim))
  return jax.tree_util.tree_map(one, groups, params)


def discriminative(groups, top: int, factor: float
                   ) -> optax.GradientTransformation:
  """Scales each group's updates by 1 / factor^(top - group)."""
  def init(params):
    del params
    return optax.EmptyState()

  def update(updates, state, params=None):
    scales = _per_leaf(groups, updates,
                       lambda g: float(factor) ** -(top - g))
    return jax.tree_util.tree_map(lambda u, s: u * s, updates, scales), state
  return optax.GradientTransformation(init, update)


def gradual_unfreezing(groups, top: int, every: int
                       ) -> optax.GradientTransformation:
  """Zeroes the gradients (or updates) of groups below top - step //
  every."""
  def init(params):
    del params
    return optax.ScaleByScheduleState(count=jnp.zeros([], jnp.int32))

  def update(updates, state, params=None):
    lowest = top - state.count // every
    masks = _per_leaf(groups, updates, lambda g: g)
    out = jax.tree_util.tree_map(
        lambda u, g: jnp.where(g >= lowest, u, 0.0), updates, masks)
    return out, optax.ScaleByScheduleState(count=state.count + 1)
  return optax.GradientTransformation(init, update)


def wrap(recipe: Recipe, params, inner: optax.GradientTransformation
         ) -> optax.GradientTransformation:
  """`inner` (the optimizer over trainable params) with the recipe's
  unfreezing before it and discriminative rates after it."""
  groups, top = layer_groups(params)
  parts = [inner]
  if recipe.unfreeze_every > 0:
    # Before: no gradient reaches a frozen group's moments; after: no
    # weight decay moves it either.
    every = recipe.unfreeze_every
    parts = [gradual_unfreezing(groups, top, every), inner,
             gradual_unfreezing(groups, top, every)]
  if recipe.layer_decay != 1.0:
    parts.append(discriminative(groups, top, recipe.layer_decay))
  return optax.chain(*parts)


def slanted_triangular(lr: float, steps: int, cut_frac: float = 0.1,
                       ratio: float = 32.0) -> optax.Schedule:
  """The paper's equation 3: lr (1 + p (ratio - 1)) / ratio, with p rising
  linearly to 1 over the first cut_frac of `steps`, then falling to 0."""
  cut = max(1, math.floor(steps * cut_frac))
  fall = cut * (1.0 / cut_frac - 1.0)

  def schedule(t):
    t = jnp.asarray(t, jnp.float32)
    p = jnp.where(t < cut, t / cut, 1.0 - (t - cut) / fall)
    return lr * (1.0 + jnp.clip(p, 0.0, 1.0) * (ratio - 1.0)) / ratio
  return schedule
