"""Gradual magnitude pruning (Zhu & Gupta 2017) as an optax transformation.

`prune(inner, config)` wraps any optimizer. Between `begin_step` and
`end_step`, every `frequency` steps (and at `end_step`), it zeroes the
smallest-magnitude weights of each matrix until the fraction of zeros
reaches the cubic schedule

    s_t = s_f + (s_i - s_f) (1 - (t - t0) / (n dt))^3,

t0 = begin_step, n dt = end_step - begin_step, held constant between
updates and at s_f after `end_step`. The masks live in the optimizer state
(`PruneState.masks`, bool, shaped like the params, so they shard and
checkpoint with them). Every step:

- gradients of masked weights are zeroed before the inner optimizer, so
  they neither move its moments nor count in a global-norm clip;
- the output updates are `-p` where the mask is 0, so `p + u` is exactly
  zero there; elsewhere they are the inner optimizer's, untouched.

Masks only ever lose ones: a pruned weight stays zero for the rest of the
run. Only matrices (ndim > 1) are pruned, and not those whose path matches
`exclude` (by default the embedding tables). With `scope="tensor"` each
matrix reaches the sparsity on its own (to within one weight); with
`scope="global"` one threshold ranks all prunable weights together. A
stacked (`scan_layers`) kernel [L, ...] counts as one tensor.

The step t is the transformation's own count of updates: the update that
turns the count from t to t + 1 leaves the params at sparsity s_t when t is
a pruning step. The new mask ranks `|p + u|`, the weights this step would
produce, so the step's learning is not thrown away.
"""

import dataclasses
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from zoo import sharding

SCOPES = ("tensor", "global")


@dataclasses.dataclass(frozen=True)
class Config:
  """The pruning schedule (hashable: a jit static argument may hold it).

  Attributes:
    target: s_f, the final fraction of zeros in each pruned matrix; 0: off.
    initial: s_i, the sparsity the first pruning step reaches.
    begin_step: t0, the first pruning step.
    end_step: the last pruning step; s_f from there on.
    frequency: dt, steps between mask updates.
    scope: "tensor" (a threshold per matrix) or "global" (one threshold).
    exclude: comma-separated substrings of "/"-joined param paths never
      pruned ("" prunes embedding tables too).
  """
  target: float = 0.0
  initial: float = 0.0
  begin_step: int = 0
  end_step: int = 1000
  frequency: int = 100
  scope: str = "tensor"
  exclude: str = "embedding"

  def check(self) -> "Config":
    """Self, or a ValueError naming the first bad field."""
    if not 0.0 <= self.target < 1.0:
      raise ValueError(f"prune target {self.target} must be in [0, 1)")
    if not 0.0 <= self.initial <= self.target:
      raise ValueError(f"prune initial {self.initial} must be in [0, target="
                       f"{self.target}]")
    if self.begin_step < 0:
      raise ValueError(f"prune begin_step {self.begin_step} must be >= 0")
    if self.end_step <= self.begin_step:
      raise ValueError(f"prune end_step {self.end_step} must be > "
                       f"begin_step {self.begin_step}")
    if self.frequency < 1:
      raise ValueError(f"prune frequency {self.frequency} must be >= 1")
    if self.scope not in SCOPES:
      raise ValueError(f"prune scope {self.scope!r} is not one of {SCOPES}")
    return self


def from_block(block) -> Config | None:
  """The checked `Config` of a config block (`optimizer.prune`, a mapping),
  or None when the block is absent or its `target` is 0 (pruning off)."""
  if block is None or float(block.get("target", 0.0)) == 0.0:
    return None
  fields = {f.name: f.type for f in dataclasses.fields(Config)}
  unknown = sorted(set(block.keys()) - set(fields))
  if unknown:
    raise ValueError(f"unknown prune keys {unknown}; keys: {sorted(fields)}")
  return Config(**{k: fields[k](v) for k, v in block.items()}).check()


def sparsity_at(config: Config, step) -> jax.Array:
  """s_t, the scheduled fraction of zeros after update `step` (int or int32
  scalar); 0 before `begin_step`. Returns a float32 scalar."""
  step = jnp.asarray(step, jnp.int32)
  t0, t1, dt = config.begin_step, config.end_step, config.frequency
  held = t0 + (jnp.minimum(step, t1) - t0) // dt * dt
  held = jnp.where(step >= t1, t1, held)
  frac = (held - t0).astype(jnp.float32) / float(t1 - t0)
  s = config.target + (config.initial - config.target) * (1.0 - frac) ** 3
  return jnp.where(step < t0, 0.0, s).astype(jnp.float32)


def update_due(config: Config, step) -> jax.Array:
  """bool scalar: whether update `step` recomputes the masks."""
  step = jnp.asarray(step, jnp.int32)
  t0, t1 = config.begin_step, config.end_step
  on_grid = ((step - t0) % config.frequency == 0) | (step == t1)
  return (step >= t0) & (step <= t1) & on_grid


def excluder(patterns: str) -> Callable[[str], bool]:
  """A path predicate: True for paths containing one of the comma-separated
  `patterns` (none: never)."""
  subs = [p.strip() for p in patterns.split(",") if p.strip()]
  return lambda name: any(s in name for s in subs)


def prunable(params, exclude: Callable[[str], bool]) -> Any:
  """A tree of Python bools like `params`: matrices not excluded."""
  return jax.tree_util.tree_map_with_path(
      lambda path, p: p.ndim > 1 and not exclude(sharding.path_str(path)), params)


class PruneState(NamedTuple):
  """count: int32 updates so far; masks: bool like the params (True =
  kept); inner: the wrapped optimizer's state."""
  count: jax.Array
  masks: Any
  inner: Any


def _rank_keep(scores: jax.Array, n_prune) -> jax.Array:
  """scores [n] f32 -> bool [n]: False at the n_prune smallest (ties by
  position), so exactly n - n_prune stay True."""
  order = jnp.argsort(scores, stable=True)
  ranks = jnp.zeros(scores.shape, jnp.int32).at[order].set(
      jnp.arange(scores.shape[0], dtype=jnp.int32))
  return ranks >= n_prune


def _count(s, n: int) -> jax.Array:
  """round(s n) as int32, the number of weights to prune of n."""
  return jnp.round(s * n).astype(jnp.int32)


def _tensor_masks(weights: list, old: list, s) -> list:
  """Per tensor: each of `weights` keeps its largest |w| among its `old`
  mask's survivors, pruned to sparsity `s`."""
  out = []
  for w, m in zip(weights, old):
    scores = jnp.where(m, jnp.abs(w), -1.0).ravel()
    keep = _rank_keep(scores, _count(s, w.size)).reshape(w.shape)
    out.append(keep & m)
  return out


def _global_masks(weights: list, old: list, s) -> list:
  """One ranking over all of `weights` together, to overall sparsity `s`."""
  scores = jnp.concatenate([jnp.where(m, jnp.abs(w), -1.0).ravel()
                            for w, m in zip(weights, old)])
  keep = _rank_keep(scores, _count(s, scores.shape[0]))
  out, start = [], 0
  for w, m in zip(weights, old):
    out.append(keep[start:start + w.size].reshape(w.shape) & m)
    start += w.size
  return out


def new_masks(config: Config, weights, masks, which, s) -> Any:
  """Masks after a pruning step.

  Args:
    config: the schedule (its `scope`).
    weights: the tree of weights to rank (float32, any shapes).
    masks: the current bool masks, like `weights`.
    which: Python bools like `weights`: the prunable leaves.
    s: float32 scalar, the sparsity to reach.

  Returns:
    bool masks like `masks`; non-prunable leaves unchanged.
  """
  w_leaves, treedef = jax.tree_util.tree_flatten(weights)
  m_leaves = treedef.flatten_up_to(masks)
  flags = treedef.flatten_up_to(which)
  picked = [i for i, f in enumerate(flags) if f]
  fn = _global_masks if config.scope == "global" else _tensor_masks
  if picked:
    fresh = fn([w_leaves[i] for i in picked], [m_leaves[i] for i in picked],
               s)
    for i, m in zip(picked, fresh):
      m_leaves[i] = m
  return treedef.unflatten(m_leaves)


def prune(inner: optax.GradientTransformation, config: Config,
          exclude: Callable[[str], bool] | None = None
          ) -> optax.GradientTransformation:
  """`inner` with gradual magnitude pruning (see the module docstring).

  Args:
    inner: the optimizer to wrap (e.g. `zoo.optim`'s AdamW chain).
    config: a `Config` (checked here).
    exclude: path predicate of matrices never pruned; None =
      `excluder(config.exclude)`.

  Returns:
    A transformation whose `update` needs `params`; its state is a
    `PruneState`.
  """
  config.check()
  exclude = excluder(config.exclude) if exclude is None else exclude

  def init(params):
    masks = jax.tree_util.tree_map(lambda p: jnp.ones(p.shape, bool), params)
    return PruneState(jnp.zeros((), jnp.int32), masks, inner.init(params))

  def update(grads, state, params=None):
    if params is None:
      raise ValueError("magnitude pruning needs params in update()")
    tree_map = jax.tree_util.tree_map
    grads = tree_map(lambda g, m: jnp.where(m, g, 0), grads, state.masks)
    updates, inner_state = inner.update(grads, state.inner, params)
    weights = tree_map(lambda p, u, m: jnp.where(m, p + u, 0), params,
                       updates, state.masks)
    masks = jax.lax.cond(
        update_due(config, state.count),
        lambda: new_masks(config, weights, state.masks,
                          prunable(params, exclude),
                          sparsity_at(config, state.count)),
        lambda: state.masks)
    updates = tree_map(lambda u, p, m: jnp.where(m, u, -p).astype(u.dtype),
                       updates, params, masks)
    return updates, PruneState(state.count + 1, masks, inner_state)

  return optax.GradientTransformation(init, update)


def find_state(opt_state) -> PruneState | None:
  """The first `PruneState` inside an optimizer state, or None."""
  found = []

  def visit(x):
    if isinstance(x, PruneState):
      found.append(x)
    return x
  jax.tree_util.tree_map(visit, opt_state,
                         is_leaf=lambda x: isinstance(x, PruneState))
  return found[0] if found else None


def sparsity(params, exclude: Callable[[str], bool] | None = None
             ) -> dict[str, Any]:
  """The fraction of exact zeros in the params, on the host.

  Args:
    params: any tree of arrays.
    exclude: path predicate of matrices to leave out; None = embeddings
      (`excluder("embedding")`), as `Config` prunes by default.

  Returns:
    {"all": zeros / size over the prunable matrices, "tensors": {path:
    fraction}, "zeros": int, "size": int}.
  """
  exclude = excluder("embedding") if exclude is None else exclude
  tensors, zeros, size = {}, 0, 0
  flat = jax.tree_util.tree_flatten_with_path(params)[0]
  for path, p in flat:
    name = sharding.path_str(path)
    if np.ndim(p) < 2 or exclude(name):
      continue
    z = int(np.sum(np.asarray(p) == 0))
    tensors[name] = z / int(np.size(p))
    zeros, size = zeros + z, size + int(np.size(p))
  return {"all": zeros / max(size, 1), "tensors": tensors, "zeros": zeros,
          "size": size}
