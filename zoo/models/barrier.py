"""A gradient barrier: identity forward, materialised gradient backward.

The residual stream's gradient is a long chain of elementwise adds across
blocks; unbroken, XLA on CPU fuses the whole chain, dropout masks included,
into every consumer and recomputes it per layer (quadratic in L: a quarter
of a GPT-2-small step). One materialised buffer per block boundary keeps it
linear (`blocks.Stack`); gated MLPs use it on each branch (`layers.Mlp`).
"""

import jax
import jax.numpy as jnp

Array = jax.Array


@jax.custom_vjp
def grad_barrier(x: Array) -> Array:
  """Identity whose gradient is materialised before it flows on. x -> x."""
  return x


def _barrier_fwd(x):
  return x, None


def _barrier_bwd(_, g):
  # XLA:CPU expands optimization barriers away before fusion; a reduction is
  # never duplicated into its consumers. This one ORs g's bits with zeros
  # (exact): XLA keeps it in its own fused loop, where a sum g + 0 would go
  # to its YNN library, slow on a trailing pair (9% of a tiny T5 step).
  bits = jnp.dtype(f"uint{8 * g.dtype.itemsize}")
  u = jax.lax.bitcast_convert_type(g, bits)
  pair = jnp.stack([u, jnp.zeros_like(u)], -1)
  kept = jax.lax.reduce(pair, bits.type(0), jax.lax.bitwise_or, (u.ndim,))
  return (jax.lax.bitcast_convert_type(kept, g.dtype),)


grad_barrier.defvjp(_barrier_fwd, _barrier_bwd)
