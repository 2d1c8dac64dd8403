"""Token cross-entropy without the full [B, T, V] logits.

A language-model head followed by a softmax cross-entropy normally keeps
float32 logits over the whole vocabulary alive from the forward pass to the
backward pass: B x T x V x 4 bytes (1 GiB for GPT-2 at batch 64 x 128).
`chunked_token_sums` computes the same sums a chunk of tokens at a time and
recomputes each chunk's logits in the backward pass, so only
[chunk, V] logits exist at once. Shapes use the letters of `layers`.
"""

import jax
import jax.numpy as jnp

from zoo.models import layers

Array = jax.Array


def _chunk_sums(h, table, bias, y, w, cdtype):
  # One chunk: logits [C, V] live only inside this (rematerialized) call.
  logits = layers.einsum("cd,vd->cv", h, table, cdtype)
  if bias is not None:
    logits = logits + bias.astype(jnp.float32)
  true = jnp.take_along_axis(logits, y[:, None], axis=-1)[:, 0]
  nll = jax.nn.logsumexp(logits, axis=-1) - true
  hit = (jnp.argmax(logits, axis=-1) == y).astype(jnp.float32)
  return (nll * w).sum(), (hit * w).sum()


def _split(x: Array, chunk: int) -> Array:
  """[B, T, ...] -> [M / chunk, chunk, ...], zero-padded at the end."""
  flat = x.reshape((-1,) + x.shape[2:])
  pad = -flat.shape[0] % chunk
  flat = jnp.pad(flat, [(0, pad)] + [(0, 0)] * (flat.ndim - 1))
  return flat.reshape((-1, chunk) + flat.shape[1:])


def chunked_token_sums(hidden: Array, table: Array, targets: Array,
                       weights: Array, *, bias: Array | None = None,
                       dtype: str = "float32", chunk: int = 1024
                       ) -> dict[str, Array]:
  """Cross-entropy sums of `hidden @ table.T (+ bias)` against `targets`.

  Equal (up to float rounding) to `objectives.common.token_sums` of the
  full logits, with the same keys, but never holds more than [chunk, V]
  logits; the backward pass recomputes them chunk by chunk.

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
  w = weights.astype(jnp.float32)
  chunk = min(chunk, targets.size)
  xs = (_split(hidden, chunk), _split(targets.astype(jnp.int32), chunk),
        _split(w, chunk))
  piece = jax.checkpoint(lambda h, tb, b, y, ww: _chunk_sums(
      h, tb, b, y, ww, cdtype))

  def body(carry, part):
    h, y, ww = part
    loss, correct = piece(h, table, bias, y, ww)
    return (carry[0] + loss, carry[1] + correct), None

  zero = jnp.zeros((), jnp.float32)
  (loss, correct), _ = jax.lax.scan(body, (zero, zero), xs)
  return {"loss_sum": loss, "weight_sum": w.sum(), "correct_sum": correct}
