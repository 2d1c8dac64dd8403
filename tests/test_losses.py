"""Tests of zoo.models.losses: chunked cross-entropy equals the dense one."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from objectives.common import token_sums
from zoo.models import losses

B, T, D, V = 3, 5, 8, 37


def _inputs(seed=0):
  k = jax.random.split(jax.random.key(seed), 5)
  hidden = jax.random.normal(k[0], (B, T, D))
  table = jax.random.normal(k[1], (V, D))
  bias = jax.random.normal(k[2], (V,))
  targets = jax.random.randint(k[3], (B, T), 0, V)
  weights = jax.random.bernoulli(k[4], 0.6, (B, T))
  return hidden, table, bias, targets, weights


def _dense(hidden, table, bias, targets, weights):
  logits = jnp.einsum("btd,vd->btv", hidden, table,
                      precision=jax.lax.Precision.HIGHEST) + bias
  return token_sums(logits, targets, weights)


@pytest.mark.parametrize("chunk", [4, 15, 64])
def test_sums_match_dense(chunk):
  hidden, table, bias, targets, weights = _inputs()
  # The model's own argmax hits for some tokens, so correct_sum is non-trivial.
  targets = targets.at[0].set(jnp.argmax(hidden[0] @ table.T + bias, -1))
  got = losses.chunked_token_sums(hidden, table, targets, weights, bias=bias,
                                  chunk=chunk)
  want = _dense(hidden, table, bias, targets, weights)
  assert float(want["correct_sum"]) > 0
  for key in want:
    np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-5)


def test_grads_match_dense():
  hidden, table, bias, targets, weights = _inputs(1)
  def chunked(h, t, b):
    return losses.chunked_token_sums(h, t, targets, weights, bias=b,
                                     chunk=4)["loss_sum"]
  def dense(h, t, b):
    return _dense(h, t, b, targets, weights)["loss_sum"]
  got = jax.grad(chunked, argnums=(0, 1, 2))(hidden, table, bias)
  want = jax.grad(dense, argnums=(0, 1, 2))(hidden, table, bias)
  for g, w in zip(got, want):
    assert float(jnp.abs(w).max()) > 0
    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_bfloat16_close_and_no_bias():
  hidden, table, _, targets, weights = _inputs(2)
  got = losses.chunked_token_sums(hidden, table, targets, weights,
                                  dtype="bfloat16", chunk=6)
  want = _dense(hidden, table, jnp.zeros((V,)), targets, weights)
  np.testing.assert_allclose(got["loss_sum"], want["loss_sum"], rtol=2e-2)
  assert float(got["weight_sum"]) == float(weights.sum())


def test_bad_shapes_raise():
  hidden, table, bias, targets, weights = _inputs()
  with pytest.raises(ValueError, match="must be \\[B, T, D\\]"):
    losses.chunked_token_sums(hidden[0], table, targets, weights)
  with pytest.raises(ValueError, match="targets"):
    losses.chunked_token_sums(hidden, table, targets[:, :2], weights)
  with pytest.raises(ValueError, match="chunk must be"):
    losses.chunked_token_sums(hidden, table, targets, weights, chunk=0)


def test_grads_without_bias_match_dense():
  hidden, table, _, targets, weights = _inputs(3)
  def chunked(h, t):
    return losses.chunked_token_sums(h, t, targets, weights,
                                     chunk=6)["loss_sum"]
  def dense(h, t):
    return _dense(h, t, jnp.zeros((V,)), targets, weights)["loss_sum"]
  got = jax.grad(chunked, argnums=(0, 1))(hidden, table)
  want = jax.grad(dense, argnums=(0, 1))(hidden, table)
  for g, w in zip(got, want):
    assert float(jnp.abs(w).max()) > 0
    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
