"""Attention-head pruning by importance (Michel et al. 2019).

Gating head n's output by a scalar xi_n is the same as scaling the rows of
the output projection that read it, W_out[n] ([N, H, D], `heads, kv,
embed`). So at xi = 1 the chain rule gives, with no change to any model,

    dL/dxi_n = sum_{h,d} W_out[n, h, d] * dL/dW_out[n, h, d].

`head_importance` sums that over a few batches and takes |.| (the paper's
I_n = E_x |dL(x)/dxi_n| with per-example batches, or `per_batch_abs`), then
normalises each layer's scores by their l2 norm as the paper does.

`prune_heads` then removes the least important heads for real: their slices
of the query/key/value kernels [D, N, H] and biases [N, H] and of the out
kernel [N, H, D] are dropped, so every matmul of attention shrinks. One
config shape serves all layers (scanned stacks, one `num_heads` field), so
every layer loses the same number of heads (each keeps its own top K).

It works on the params of any model whose attention is
`layers.MultiHeadAttention` with its standard names (query, key, value,
out): attention modules are found by shape of the tree, unrolled
(`layer_<i>/attention`, kernels [D, N, H]) or scanned (`layers/block/
attention`, stacked [L, D, N, H]). Tested on bert, roberta and electra
(one network, `electra.Model`). Families with per-head params elsewhere
(T5's relative-position table [buckets, N]) are not handled.

Letters: L layers, D embed, N heads (K kept), H head dim.
"""

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any, Callable, Iterable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

Path = tuple[str, ...]
PROJECTIONS = ("query", "key", "value")


def _is_attention(node) -> bool:
  names = PROJECTIONS + ("out",)
  return isinstance(node, Mapping) and all(
      isinstance(node.get(k), Mapping) and "kernel" in node[k] for k in names)


def find_attention(params) -> list[Path]:
  """Paths (tuples of keys) of the attention modules in a params tree."""
  found = []

  def walk(node, path):
    if _is_attention(node):
      found.append(path)
    elif isinstance(node, Mapping):
      for key in node:
        walk(node[key], path + (key,))
  walk(params, ())
  return found


def _get(tree, path: Path):
  for key in path:
    tree = tree[key]
  return tree


def _replace(tree, path: Path, value):
  """A copy of nested dicts `tree` with the node at `path` set to value."""
  if not path:
    return value
  out = dict(tree)
  out[path[0]] = _replace(tree[path[0]], path[1:], value)
  return out


def _plain(params):
  """Params without logical boxes, as nested dicts."""
  return nn.meta.unbox(params)


def num_heads_of(params) -> int:
  """N, the heads of every attention module (ValueError if they differ or
  there is none)."""
  counts = {_get(params, p)["out"]["kernel"].shape[-3]
            for p in find_attention(params)}
  if len(counts) != 1:
    raise ValueError(f"expected attention modules with one head count, "
                     f"found {sorted(counts) or 'none'}")
  return counts.pop()


def gate_grads(params, grads) -> dict[Path, jax.Array]:
  """dL/dxi per head from a gradient tree like `params`.

  Returns:
    {module path: [N] (unrolled) or [L, N] (scanned)} float32, the
    einsum "...nhd,...nhd->...n" of W_out and dL/dW_out.
  """
  out = {}
  for path in find_attention(params):
    w = _get(params, path)["out"]["kernel"]
    g = _get(grads, path)["out"]["kernel"]
    out[path] = jnp.einsum("...nhd,...nhd->...n", w, g,
                           precision=jax.lax.Precision.HIGHEST)
  return out


def normalise(scores: dict[Path, Any]) -> dict[Path, np.ndarray]:
  """Each layer's scores divided by their l2 norm (over N, the last axis)."""
  out = {}
  for path, s in scores.items():
    s = np.asarray(s, np.float64)
    norm = np.linalg.norm(s, axis=-1, keepdims=True)
    out[path] = (s / np.where(norm > 0, norm, 1.0)).astype(np.float32)
  return out


@functools.lru_cache(maxsize=8)
def _gate_step(loss_fn):
  """Jitted `(params, batch) -> gate_grads`, one per loss function."""
  return jax.jit(lambda p, b: gate_grads(p, jax.grad(loss_fn)(p, b)))


def head_importance(loss_fn: Callable[[Any, Any], jax.Array], params,
                    batches: Iterable, *, per_batch_abs: bool = False,
                    normalised: bool = True) -> dict[Path, np.ndarray]:
  """Importance of every head: |sum over batches of dL/dxi|.

  Args:
    loss_fn: `(params, batch) -> scalar` loss, differentiable in params.
    params: the model's params (plain or boxed).
    batches: a few batches for `loss_fn`.
    per_batch_abs: sum |dL/dxi| of each batch instead (batches of one
      example give the paper's E_x |dL(x)/dxi|).
    normalised: divide by each layer's l2 norm (`normalise`).

  Returns:
    {module path: [N] or [L, N]} float32 scores, larger = more important.
  """
  params = _plain(params)
  step = _gate_step(loss_fn)
  total = None
  for batch in batches:
    g = step(params, batch)
    if per_batch_abs:
      g = {k: jnp.abs(v) for k, v in g.items()}
    total = g if total is None else {k: total[k] + g[k] for k in total}
  if total is None:
    raise ValueError("head_importance needs at least one batch")
  scores = {k: np.abs(np.asarray(v)) for k, v in total.items()}
  return normalise(scores) if normalised else scores


def keep_top(scores: dict[Path, Any], num_remove: int
             ) -> dict[Path, np.ndarray]:
  """The heads each layer keeps: its N - num_remove highest scores.

  Returns:
    {module path: int32 [K] or [L, K]} head indices, ascending (heads keep
    their order).
  """
  out = {}
  for path, s in scores.items():
    s = np.asarray(s)
    n = s.shape[-1]
    if not 0 <= num_remove < n:
      raise ValueError(f"cannot remove {num_remove} of {n} heads per layer "
                       f"({'/'.join(path)}); at least one must stay")
    top = np.argsort(-s, axis=-1, kind="stable")[..., :n - num_remove]
    out[path] = np.sort(top, axis=-1).astype(np.int32)
  return out


def _take(x: jax.Array, idx: np.ndarray, axis: int) -> jax.Array:
  """x [..., N, ...] at head indices idx [K] or [L, K] (x then [L, ...])
  along `axis` (negative) -> [..., K, ...]."""
  if idx.ndim == 1:
    return jnp.take(x, jnp.asarray(idx), axis=axis)
  shape = [1] * x.ndim
  shape[0], shape[axis] = idx.shape
  return jnp.take_along_axis(x, jnp.asarray(idx).reshape(shape), axis=axis)


def _shrink(module: dict, idx: np.ndarray) -> dict:
  """An attention module's params with only the heads `idx`."""
  out = {}
  for name in PROJECTIONS:
    proj = dict(module[name])
    proj["kernel"] = _take(proj["kernel"], idx, -2)  # [.., D, N, H]
    if "bias" in proj:
      proj["bias"] = _take(proj["bias"], idx, -2)  # [.., N, H]
    out[name] = proj
  out["out"] = dict(module["out"])
  out["out"]["kernel"] = _take(module["out"]["kernel"], idx, -3)
  return {**module, **out}


def remove_heads(params, kept: dict[Path, np.ndarray]):
  """Params with only the `kept` heads (as `keep_top` gives) in each
  attention module; q/k/v kernels [.., D, K, H], out [.., K, H, D]."""
  params = _plain(params)
  for path, idx in kept.items():
    params = _replace(params, path, _shrink(_get(params, path), idx))
  return params


def zero_heads(params, kept: dict[Path, np.ndarray]):
  """Params of the unshrunk model whose removed heads output zero: the out
  kernel rows [.., N, H, D] of heads not in `kept` set to 0. Equal in
  function to `remove_heads(params, kept)` (the reference of tests)."""
  params = _plain(params)
  for path, idx in kept.items():
    module = _get(params, path)
    w = module["out"]["kernel"]
    gate = np.zeros(idx.shape[:-1] + (w.shape[-3],), np.float32)
    np.put_along_axis(gate, idx, 1.0, axis=-1)
    out = dict(module["out"], kernel=w * gate[..., None, None])
    params = _replace(params, path, {**module, "out": out})
  return params


def pruned_config(config, num_heads: int):
  """`config` with `num_heads` heads of the same head dim H (its `head_dim`
  field set, as BERT and its kin otherwise derive H = D / N)."""
  head_dim = config.block().head_dim
  return dataclasses.replace(config, num_heads=num_heads, head_dim=head_dim)


def prune_heads(params, config, scores: dict[Path, Any], num_remove: int):
  """Removes `num_remove` heads from every layer, the least important.

  Args:
    params: the model's params (plain or boxed).
    config: its family Config (its `num_heads` must match the params).
    scores: {module path: [N] or [L, N]}, e.g. `head_importance`'s.
    num_remove: heads to drop per layer, 0 <= num_remove < N.

  Returns:
    `(params, config, kept)`: the shrunk params, the config with N -
    num_remove heads (`pruned_config`), and `keep_top`'s indices.
  """
  params = _plain(params)
  n = num_heads_of(params)
  if n != config.num_heads:
    raise ValueError(f"the params have {n} heads per layer, the config "
                     f"{config.num_heads}")
  missing = sorted("/".join(p) for p in set(find_attention(params))
                   - set(scores))
  if missing:
    raise ValueError(f"no scores for the attention modules {missing}")
  kept = keep_top(scores, num_remove)
  return (remove_heads(params, kept), pruned_config(config, n - num_remove),
          kept)


def count_params(params) -> int:
  """The number of scalars in a params tree."""
  return sum(int(np.size(x)) for x in jax.tree_util.tree_leaves(params))
