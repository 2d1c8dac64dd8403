"""Gradient accumulation that equals one big batch, for every scheme.

`grads(objective, params, batch, rng, micro, mesh, rules)` returns the
gradient, loss and metric sums of the whole batch while only one
microbatch of B/M rows runs through the model at a time:

1. the corruption runs once, on the whole batch (sentence-pair negatives,
   UniLM modes and every in-batch choice are the big batch's);
2. the model runs on each microbatch without gradients, and the scheme
   scores the concatenated outputs as one batch (its loss weights, per-part
   means and cross-row terms, such as Quick-Thought's contrastive logits,
   are the big batch's), giving the gradient of the loss with respect to
   the scheme's own params and to every float output;
3. each microbatch runs again with a VJP of those output gradients (the
   "gradient cache" of Gao et al. 2021), summed into the params' gradient.

So the result equals the big batch's up to float rounding whenever the
model's forward pass is the same per row in both (dropout off; a scheme
that samples inside its forward pass draws per row, see ELECTRA). The cost
is one extra forward pass per microbatch, and the float outputs the score
reads are held for the whole batch. Letters: B rows, M microbatches.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from objectives import common
from zoo import sharding


def grads(objective, params, batch, rng, micro: int, mesh, rules):
  """`(grads, loss, metrics)` of the batch's mean loss over `micro` parts.

  Args:
    objective: a bound scheme (`corrupt`, `run`, `score`, `part_weights`).
    params: its params (boxed or not); grads come back in the same form.
    batch: the contract's global [B, T] arrays.
    rng: the step's key, split as `objective.loss` splits it.
    micro: M, which divides B.
    mesh, rules: keep each device's rows on that device when splitting.
  """
  k_noise, k_drop, k_score = jax.random.split(rng, 3)
  inputs = objective.corrupt(common.as_batch(batch), k_noise)
  rows = batch["doc_ids"].shape[0]
  parts = _split(inputs, rows, micro, mesh, rules)
  keys = jax.vmap(lambda i: jax.random.fold_in(k_drop, i))(jnp.arange(micro))

  def run(p, part, key):
    out = objective.run(nn.meta.unbox(p), _whole(inputs, part, rows), key,
                        False)
    return {k: v for k, v in out.items() if _is_float(v)}, out

  def forward(_, xs):
    return None, run(params, *xs)[1]

  _, outs = jax.lax.scan(forward, None, (parts, keys))
  outputs = jax.tree_util.tree_map(_merge, outs)
  floats = {k: v for k, v in outputs.items() if _is_float(v)}

  def total(p, flt):
    parts_ = objective.score(nn.meta.unbox(p), inputs, dict(outputs, **flt),
                             k_score, False)
    return common.combine(parts_, objective.part_weights)

  (loss, metrics), (g_own, g_out) = jax.value_and_grad(
      total, argnums=(0, 1), has_aux=True)(params, floats)
  g_parts = jax.tree_util.tree_map(lambda g: _unmerge(g, micro), g_out)

  def backward(acc, xs):
    part, key, cot = xs
    _, vjp = jax.vjp(lambda p: run(p, part, key)[0], params)
    return jax.tree_util.tree_map(jnp.add, acc, vjp(cot)[0]), None

  g_model, _ = jax.lax.scan(backward, jax.tree_util.tree_map(
      jnp.zeros_like, g_own), (parts, keys, g_parts))
  return jax.tree_util.tree_map(jnp.add, g_own, g_model), loss, metrics


def _is_float(x) -> bool:
  """Whether an output (an array, or a tree of them: a teacher's and a
  student's output dicts) is float throughout."""
  leaves = jax.tree_util.tree_leaves(x)
  return bool(leaves) and all(
      jnp.issubdtype(jnp.asarray(v).dtype, jnp.floating) for v in leaves)


def _per_row(x, rows: int) -> bool:
  return jnp.ndim(x) >= 1 and x.shape[0] == rows


def _split(inputs, rows: int, micro: int, mesh, rules):
  """The per-row leaves of `inputs` as [M, B/M, ...] (others become 0)."""
  spec = sharding.mesh_axes_for((None, "batch"), rules)
  def one(x):
    if not _per_row(x, rows):
      return jnp.zeros((micro,), jnp.int32)
    x = jnp.swapaxes(x.reshape((rows // micro, micro) + x.shape[1:]), 0, 1)
    full = jax.sharding.PartitionSpec(*spec, *([None] * (x.ndim - 2)))
    return jax.lax.with_sharding_constraint(
        x, jax.sharding.NamedSharding(mesh, full))
  return jax.tree_util.tree_map(one, inputs)


def _whole(inputs, part, rows: int):
  """One microbatch's inputs: its rows, and the batch-wide leaves whole."""
  return jax.tree_util.tree_map(
      lambda x, p: p if _per_row(x, rows) else x, inputs, part)


def _merge(x):
  """[M, B/M, ...] -> [B, ...], undoing `_split`'s row order."""
  return jnp.swapaxes(x, 0, 1).reshape((-1,) + x.shape[2:])


def _unmerge(x, micro: int):
  """[B, ...] -> [M, B/M, ...] in `_split`'s row order."""
  return jnp.swapaxes(x.reshape((-1, micro) + x.shape[1:]), 0, 1)
