"""zoo.plan.flops: matmul FLOPs from a jaxpr, scans counted in full."""

import jax
import jax.numpy as jnp

from zoo.plan import flops


def test_a_matmul_is_two_m_n_k():
  x = jax.ShapeDtypeStruct((8, 16), jnp.float32)
  w = jax.ShapeDtypeStruct((16, 32), jnp.float32)
  assert flops.of_traced(lambda a, b: a @ b, x, w) == 2 * 8 * 16 * 32


def test_a_scan_counts_its_body_per_step_and_grad_adds_the_backward():
  w = jax.ShapeDtypeStruct((5, 16, 16), jnp.float32)
  x = jax.ShapeDtypeStruct((4, 16), jnp.float32)

  def stack(ws, h):
    return jax.lax.scan(lambda c, wi: (jnp.tanh(c @ wi), None), h, ws)[0]

  one = 2 * 4 * 16 * 16
  assert flops.of_traced(stack, w, x) == 5 * one
  # The gradient w.r.t. both: forward, plus two matmuls per layer back.
  grad = jax.grad(lambda ws, h: stack(ws, h).sum(), argnums=(0, 1))
  assert flops.of_traced(grad, w, x) == 3 * 5 * one
  unrolled = lambda ws, h: jax.lax.fori_loop(  # pylint: disable=g-long-lambda
      0, 5, lambda i, c: jnp.tanh(c @ ws[i]), h)
  assert flops.of_traced(unrolled, w, x) == 5 * one
