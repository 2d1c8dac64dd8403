"""The gradient barrier: exact identity, and it survives XLA's fusion."""

import re

import jax
import jax.numpy as jnp
import numpy as np

from zoo import models
from zoo.models import barrier
import pytest

KEY = jax.random.key(0)


def test_grad_barrier_is_the_identity_in_both_passes():
  x = jax.random.normal(KEY, (2, 3, 4))
  w = jnp.arange(24.0).reshape(2, 3, 4)
  f = lambda x: (jnp.sin(barrier.grad_barrier(x)) * w).sum()
  np.testing.assert_array_equal(jax.jit(barrier.grad_barrier)(x), x)
  np.testing.assert_allclose(jax.jit(jax.grad(f))(x), jnp.cos(x) * w,
                             rtol=1e-6)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_the_barrier_passes_a_gradient_on_bit_for_bit(dtype):
  x = jax.random.normal(KEY, (3, 5)).astype(dtype)
  w = jax.random.normal(jax.random.key(1), (3, 5)).astype(dtype)
  w = w.at[0, 0].set(-0.0).at[0, 1].set(jnp.inf)  # signs and specials too
  g = jax.jit(jax.grad(lambda x: (barrier.grad_barrier(x) * w).sum()))(x)
  assert g.dtype == dtype
  bits = jnp.uint16 if dtype == jnp.bfloat16 else jnp.uint32
  as_bits = lambda a: jax.lax.bitcast_convert_type(a, bits)  # pylint: disable=unnecessary-lambda-assignment
  np.testing.assert_array_equal(as_bits(g), as_bits(w))


def _widest_fusion_of_gpt2_grad(num_layers: int) -> int:
  """Most operands of any fusion in the compiled dropout-on gradient."""
  _, model = models.make("gpt2", "tiny", num_layers=num_layers)
  ids = jnp.ones((2, 16), jnp.int32)
  params = model.init(KEY, ids)
  loss = lambda p: jnp.mean(model.apply(
      p, ids, deterministic=False, rngs={"dropout": KEY})["logits"] ** 2)
  text = jax.jit(jax.grad(loss)).lower(params).compile().as_text()
  return max(line.count("%") - 1 for line in text.splitlines()
             if re.search(r"= \S+ fusion\(", line))


@pytest.mark.slow
def test_grad_barrier_keeps_backward_fusions_from_spanning_blocks():
  # Without a barrier that survives compilation, the residual gradient's
  # chain (dropout masks included) is fused into every consumer, so the
  # widest fusion grows with depth (52 operands at 2 layers, 175 at 8).
  assert _widest_fusion_of_gpt2_grad(8) <= _widest_fusion_of_gpt2_grad(2) + 4
