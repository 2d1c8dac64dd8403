"""Token cross-entropy without the full [B, T, V] logits.

A language-model head followed by a softmax cross-entropy normally keeps
float32 logits over the whole vocabulary alive from the forward pass to the
backward pass: B x T x V x 4 bytes (1 GiB for GPT-2 at batch 64 x 128).
`chunked_token_sums` computes the same sums a chunk of tokens at a time,
and under `jax.grad` forms each chunk's gradients w.r.t. the states, the
table and the bias while that chunk's logits are at hand (a custom VJP), so
only [chunk, V] logits exist at once and none is stored or recomputed.
Alone, the GPT-2-small head and loss at 8 x 128 run ~1.5x faster on a
2-core CPU than plain logits under autodiff, yet a whole training step
measured no faster, so the objectives keep plain logits and this is for
when the [B, T, V] logits do not fit. Shapes use the letters of `layers`.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from zoo.models import layers

Array = jax.Array


def _logits(h, table, bias, cdtype):
  """[C, D] states -> [C, V] float32 logits."""
  logits = layers.einsum("cd,vd->cv", h, table, cdtype)
  return logits if bias is None else logits + bias


def _chunk_sums(logits, y, w):
  """Weighted NLL and hit sums of one chunk's [C, V] logits, and the LSE.

  A hit is a target logit equal to the row's maximum (argmax up to exact
  ties), which saves a pass over the logits.
  """
  true = jnp.take_along_axis(logits, y[:, None], axis=-1)[:, 0]
  top = jax.lax.stop_gradient(logits.max(axis=-1))
  lse = top + jnp.log(jnp.exp(logits - top[:, None]).sum(axis=-1))
  hit = (true >= top).astype(jnp.float32)
  return ((lse - true) * w).sum(), (hit * w).sum(), lse


def _split(x: Array, chunk: int) -> Array:
  """[M, ...] -> [M / chunk, chunk, ...], zero-padded at the end."""
  pad = -x.shape[0] % chunk
  x = jnp.pad(x, [(0, pad)] + [(0, 0)] * (x.ndim - 1))
  return x.reshape((-1, chunk) + x.shape[1:])


def _sums(h, table, bias, y, w, cdtype, chunk):
  """Forward only: (loss, correct) scanned over chunks of the M rows."""
  def body(carry, part):
    hh, yy, ww = part
    loss, correct, _ = _chunk_sums(_logits(hh, table, bias, cdtype), yy, ww)
    return (carry[0] + loss, carry[1] + correct), None
  zero = jnp.zeros((), jnp.float32)
  xs = (_split(h, chunk), _split(y, chunk), _split(w, chunk))
  return jax.lax.scan(body, (zero, zero), xs)[0]


def _sums_and_grads(h, table, bias, y, w, cdtype, chunk):
  """(loss, correct) and d loss / d (h, table, bias), one pass over chunks.

  The gradient of a chunk's loss w.r.t. its logits is
  w * (softmax - onehot): it is formed, used for the two matmuls of the
  backward pass and dropped while the chunk's logits are at hand, so the
  logits are never stored nor recomputed.
  """
  def body(carry, part):
    hh, yy, ww = part
    logits = _logits(hh, table, bias, cdtype)
    loss, correct, lse = _chunk_sums(logits, yy, ww)
    d = jnp.exp(logits - lse[:, None])
    d = d.at[jnp.arange(yy.shape[0]), yy].add(-1.0) * ww[:, None]
    d_table = layers.einsum("cv,cd->vd", d, hh, cdtype)
    d_h = layers.einsum("cv,vd->cd", d, table, cdtype)
    d_bias = None if bias is None else carry[3] + d.sum(0)
    return (carry[0] + loss, carry[1] + correct, carry[2] + d_table,
            d_bias), d_h
  zero = jnp.zeros((), jnp.float32)
  init = (zero, zero, jnp.zeros(table.shape, jnp.float32),
          None if bias is None else jnp.zeros(bias.shape, jnp.float32))
  xs = (_split(h, chunk), _split(y, chunk), _split(w, chunk))
  (loss, correct, d_table, d_bias), d_h = jax.lax.scan(body, init, xs)
  d_h = d_h.reshape((-1,) + h.shape[1:])[:h.shape[0]]
  return (loss, correct), (d_h.astype(h.dtype), d_table.astype(table.dtype),
                           d_bias)


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6))
def _fused(h, table, bias, y, w, cdtype, chunk):
  return _sums(h, table, bias, y, w, cdtype, chunk)


def _fused_fwd(h, table, bias, y, w, cdtype, chunk):
  out, grads = _sums_and_grads(h, table, bias, y, w, cdtype, chunk)
  return out, (grads, y, w)


def _fused_bwd(cdtype, chunk, res, g):
  del cdtype, chunk
  grads, y, w = res
  scale = g[0]  # correct_sum (an argmax count) has no gradient
  d_h, d_table, d_bias = jax.tree.map(
      lambda x: (scale * x).astype(x.dtype), grads)
  return (d_h, d_table, d_bias, np.zeros(y.shape, jax.dtypes.float0),
          jnp.zeros_like(w))


_fused.defvjp(_fused_fwd, _fused_bwd)


def chunked_token_sums(hidden: Array, table: Array, targets: Array,
                       weights: Array, *, bias: Array | None = None,
                       dtype: str = "float32", chunk: int = 1024
                       ) -> dict[str, Array]:
  """Cross-entropy sums of `hidden @ table.T (+ bias)` against `targets`.

  Equal (up to float rounding) to `objectives.common.token_sums` of the
  full logits, with the same keys, but never holds more than [chunk, V]
  logits. Differentiable in reverse mode, first order, w.r.t. hidden,
  table and bias (`weights` are constants; `correct_sum` has no gradient);
  when differentiated, the forward pass also forms the gradients.

  Args:
    hidden: [B, T, D] float, the states the output layer reads.
    table: [V, D] float, the output embedding (a tied token table; for an
      untied [D, V] kernel pass `kernel.T`).
    targets: [B, T] int, ids in [0, V).
    weights: [B, T] bool or float, 0 where nothing is predicted.
    bias: optional [V] float output bias.
    dtype: compute dtype name of the logit matmul (float32 accumulation
      either way; logsumexp is float32).
    chunk: tokens per chunk (rows of B*T); the last chunk is zero-padded.

  Returns:
    dict of float32 scalars `loss_sum`, `weight_sum`, `correct_sum`.
  """
  if hidden.ndim != 3 or hidden.shape[-1] != table.shape[-1]:
    raise ValueError(f"hidden {hidden.shape} must be [B, T, D] with D = "
                     f"table {table.shape}[-1]")
  if targets.shape != hidden.shape[:2] or weights.shape != targets.shape:
    raise ValueError(f"targets {targets.shape} and weights {weights.shape} "
                     f"must both be [B, T] = {hidden.shape[:2]}")
  if chunk < 1:
    raise ValueError(f"chunk must be >= 1, got {chunk}")
  cdtype = layers.compute_dtype(dtype)
  w = weights.astype(jnp.float32).reshape(-1)
  chunk = min(chunk, targets.size)
  if bias is not None:
    bias = bias.astype(jnp.float32)
  h = hidden.reshape((-1, hidden.shape[-1]))
  y = targets.astype(jnp.int32).reshape(-1)
  loss, correct = _fused(h, table, bias, y, w, cdtype, chunk)
  return {"loss_sum": loss, "weight_sum": w.sum(), "correct_sum": correct}
