"""The CPU attention kernel against the einsum attention it stands in for."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from zoo import sharding
from zoo.models import cpu_attention, layers
from zoo.models import dropout as dropout_lib

# (B, T, S, N, H, dropout rate, bias shape, mask): the tiny models' shape, odd
# lengths and head dims, every mask and bias broadcast, a query with no key
# (row 1 of batch 0 is all False), the largest head dim, and the masks whose
# rows end early (causal; padded keys), whose masked tails the kernel skips,
# with a bias per (row, head) whose gradient's skipped tail is zero; T = 33
# and 37 leave a block of query rows part empty; one batch row, where a
# [1, N, T, S] bias is both shared and per row.
CASES = [
    (4, 32, 32, 4, 16, 0.1, None, "b1ts"),
    (3, 37, 29, 3, 24, 0.2, "1nts", "b1ts"),
    (2, 5, 7, 2, 64, 0.0, "bnts", "1nts"),
    (2, 9, 9, 1, 8, 0.5, None, "bts"),
    (1, 6, 11, 2, 5, 0.0, "b1ts", None),
    (2, 40, 40, 2, 16, 0.1, "1nts", "causal"),
    (3, 35, 35, 2, 16, 0.1, None, "padded"),
    (3, 33, 35, 2, 16, 0.1, "bnts", "padded"),
    (1, 7, 9, 2, 8, 0.0, "1nts", "b1ts"),
]


def _inputs(b, t, s, n, h, with_bias, mask_shape):
  ks = jax.random.split(jax.random.PRNGKey(b * 100 + t), 6)
  q = jax.random.normal(ks[0], (b, t, n, h))
  k, v = (jax.random.normal(x, (b, s, n, h)) for x in ks[1:3])
  dout = jax.random.normal(ks[3], (b, t, n, h))
  shapes = {"b1ts": (b, 1, t, s), "1nts": (1, n, t, s), "bts": (b, t, s)}
  mask = None
  if mask_shape == "causal":
    mask = jnp.tril(jnp.ones((1, 1, t, s), bool))
  elif mask_shape == "padded":
    keys = jnp.arange(s) < jnp.array([s, 17, 3])[:b, None]
    mask = jnp.broadcast_to(keys[:, None, None, :], (b, 1, t, s))
  if mask_shape in ("b1ts", "1nts", "bts"):
    mask = jax.random.bernoulli(ks[4], 0.8, shapes[mask_shape])
    mask = mask.at[0, ..., 1, :].set(False)
  bias = None
  if with_bias:
    shape = {"1nts": (1, n, t, s), "bnts": (b, n, t, s), "b1ts": (b, 1, t, s)}
    bias = jax.random.normal(ks[5], shape[with_bias])
  return q, k, v, dout, mask, bias


def _step(impl, dout, mask, dropout, with_bias):
  def loss(q, k, v, bias):
    out = layers.attention(q, k, v, mask=mask, bias=bias, impl=impl,
                           dropout=dropout)
    return jnp.sum(out * dout)
  argnums = (0, 1, 2, 3) if with_bias else (0, 1, 2)
  return jax.jit(jax.value_and_grad(loss, argnums))


def _loss_and_grads(impl, q, k, v, dout, mask, bias, dropout):
  return _step(impl, dout, mask, dropout, bias is not None)(q, k, v, bias)


def _assert_matches(got, want):
  np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
  for g, w in zip(got[1], want[1]):
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5 * np.abs(w).max())


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
def test_the_kernel_matches_einsum_attention_and_its_gradients(case):
  b, t, s, n, h, rate, with_bias, mask_shape = case
  q, k, v, dout, mask, bias = _inputs(b, t, s, n, h, with_bias, mask_shape)
  drop = (dropout_lib.KeyedDropout(jax.random.PRNGKey(7), rate)
          if rate else None)
  want = _loss_and_grads("einsum", q, k, v, dout, mask, bias, drop)
  got = _loss_and_grads("cpu", q, k, v, dout, mask, bias, drop)
  _assert_matches(got, want)


def test_a_shared_bias_gets_the_same_gradient_on_every_call():
  """The kernel returns ds per (row, head) and XLA sums it over the bias's
  broadcasts: no sum depends on which thread ran which item."""
  q, k, v, dout, mask, bias = _inputs(8, 32, 32, 2, 16, "1nts", "causal")
  step = _step("cpu", dout, mask, None, True)
  first = step(q, k, v, bias)[1][3]
  for _ in range(4):
    np.testing.assert_array_equal(step(q, k, v, bias)[1][3], first)


# A mesh and a case: rows and heads split; a bias shared by the rows (its
# gradient summed over the devices that split them) with causal dropout;
# a bias shared by the heads, with the one row kept whole.
MESH_CASES = [
    ({"data": 2, "tensor": 2}, CASES[0]),
    ({"data": 2, "tensor": 2}, CASES[5]),
    ({"fsdp": 2, "tensor": 2}, CASES[4]),
]


@pytest.mark.parametrize("cfg, case", MESH_CASES,
                         ids=lambda c: "x".join(map(str, c)) if len(c) > 3
                         else "_".join(f"{k}{v}" for k, v in c.items()))
def test_on_a_mesh_each_device_runs_the_kernel_on_its_rows_and_heads(
    cfg, case):
  b, t, s, n, h, rate, with_bias, mask_shape = case
  q, k, v, dout, mask, bias = _inputs(b, t, s, n, h, with_bias, mask_shape)
  drop = (dropout_lib.KeyedDropout(jax.random.PRNGKey(7), rate)
          if rate else None)
  want = _loss_and_grads("einsum", q, k, v, dout, mask, bias, drop)
  mesh = sharding.make_mesh(cfg, jax.devices()[:4])
  step = _step("cpu", dout, mask, drop, bias is not None)
  with sharding.activate(mesh, sharding.DEFAULT_RULES):
    compiled = step.lower(q, k, v, bias).compile().as_text()
    got = step(q, k, v, bias)
  _assert_matches(got, want)  # dropout too: each device draws its slice
  assert "zoo_attention_backward" in compiled
  assert "all-gather" not in compiled


def test_the_kernel_draws_the_einsum_dropout_mask():
  q, k, v, _, mask, _ = _inputs(2, 16, 16, 2, 8, None, "b1ts")
  drop = dropout_lib.KeyedDropout(jax.random.PRNGKey(3), 0.5)
  run = lambda impl, d: layers.attention(q, k, v, mask=mask, impl=impl,  # pylint: disable=g-long-lambda
                                         dropout=d)
  kept = run("cpu", drop)
  np.testing.assert_allclose(kept, run("einsum", drop), atol=1e-5)
  # Half the probabilities dropped: far from the output without dropout.
  assert np.abs(kept - run("cpu", None)).max() > 0.1


def test_a_keyed_dropout_draws_the_mask_of_its_module():
  class Probs(nn.Module):
    keyed: bool
    rate: float = 0.3

    @nn.compact
    def __call__(self, x):
      drop = layers.Dropout(self.rate, deterministic=False)
      return drop.keyed()(x) if self.keyed else drop(x)

  x = jnp.ones((2, 3, 5, 5))
  rngs = {"dropout": jax.random.PRNGKey(11)}
  outs = [Probs(keyed).apply({}, x, rngs=rngs) for keyed in (False, True)]
  np.testing.assert_array_equal(outs[0], outs[1])
  assert 0 < float((outs[0] == 0).mean()) < 1
  # At rate 1 the module drops everything, keyed or not.
  assert not Probs(True, 1.0).apply({}, x, rngs=rngs).any()


def _lowered(monkeypatch, devices, impl="auto", platforms=None):
  monkeypatch.setattr(jax, "device_count", lambda: devices)
  q, k, v, _, mask, _ = _inputs(2, 8, 8, 2, 8, None, "b1ts")
  fn = jax.jit(lambda q, k, v: layers.attention(q, k, v, mask=mask,
                                                impl=impl))
  traced = fn.trace(q, k, v)
  lowered = (traced.lower(lowering_platforms=platforms) if platforms
             else traced.lower())
  return lowered.as_text()


def test_auto_takes_the_kernel_on_one_device_or_inside_a_mesh(monkeypatch):
  assert "zoo_attention_forward" in _lowered(monkeypatch, 1)
  assert "zoo_attention_forward" not in _lowered(monkeypatch, 8)
  mesh = sharding.make_mesh({"data": 2, "tensor": 2}, jax.devices()[:4])
  with sharding.activate(mesh, sharding.DEFAULT_RULES):
    assert "zoo_attention_forward" in _lowered(monkeypatch, 8)
  with cpu_attention.off():
    assert "zoo_attention_forward" not in _lowered(monkeypatch, 1)
  assert "zoo_attention_forward" in _lowered(monkeypatch, 1)
  monkeypatch.setenv(cpu_attention.ENV, "0")
  assert "zoo_attention_forward" not in _lowered(monkeypatch, 1)


def test_other_platforms_lower_the_einsum_attention(monkeypatch):
  text = _lowered(monkeypatch, 1, impl="cpu", platforms=("tpu",))
  assert "zoo_attention_forward" not in text
  assert "exponential" in text


@pytest.mark.parametrize("dtype, h, error", [
    ("bfloat16", 8, "compute dtype bfloat16"),
    ("float32", 65, "head dim 65 above 64"),
])
def test_what_the_kernel_cannot_take_is_named(dtype, h, error):
  q = jnp.ones((1, 4, 1, h))
  with pytest.raises(ValueError, match=error):
    layers.attention(q, q, q, impl="cpu", dtype=dtype)


def test_a_module_dropout_is_refused_by_name():
  q = jnp.ones((1, 4, 1, 8))
  with pytest.raises(ValueError, match="not a KeyedDropout"):
    layers.attention(q, q, q, impl="cpu", dropout=lambda p: p)
