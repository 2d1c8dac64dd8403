"""The counter-hash dropout: keep rate, independence, scaling, sharding."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

from zoo.models import dropout


@pytest.mark.parametrize("rate", [0.1, 0.5, 0.9])
def test_keep_fraction_matches_rate(rate):
  keep = np.asarray(dropout.keep_mask(jax.random.key(0), rate, (256, 1024)))
  n = keep.size
  # Binomial standard error; 5 sigma.
  assert abs(keep.mean() - (1 - rate)) < 5 * np.sqrt(rate * (1 - rate) / n)


def test_masks_of_two_keys_are_independent():
  a = np.asarray(dropout.keep_mask(jax.random.key(1), 0.5, (512, 512)))
  b = np.asarray(dropout.keep_mask(jax.random.key(2), 0.5, (512, 512)))
  agree = (a == b).mean()
  assert abs(agree - 0.5) < 5 * 0.5 / np.sqrt(a.size)
  same = np.asarray(dropout.keep_mask(jax.random.key(1), 0.5, (512, 512)))
  np.testing.assert_array_equal(a, same)


def test_neighbouring_elements_are_uncorrelated():
  bits = np.asarray(dropout.keep_mask(jax.random.key(3), 0.5, (1 << 18,)),
                    np.float64) - 0.5
  for lag in (1, 2, 64, 1024):
    corr = np.mean(bits[:-lag] * bits[lag:]) / 0.25
    assert abs(corr) < 5 / np.sqrt(bits.size), lag


def test_module_scales_kept_values_and_is_identity_when_deterministic():
  x = jnp.ones((64, 128))
  layer = dropout.Dropout(0.25)
  y = layer.apply({}, x, deterministic=False,
                  rngs={"dropout": jax.random.key(0)})
  kept = np.asarray(y) != 0
  np.testing.assert_allclose(np.asarray(y)[kept], 1 / 0.75, rtol=1e-6)
  assert 0.7 < kept.mean() < 0.8
  np.testing.assert_array_equal(layer.apply({}, x, deterministic=True), x)
  with pytest.raises(ValueError, match="deterministic"):
    layer.apply({}, x)


def test_gradient_flows_through_kept_elements_only():
  layer = dropout.Dropout(0.5)
  x = jnp.arange(1.0, 257.0)

  def f(v):
    return jnp.sum(layer.apply({}, v, deterministic=False,
                               rngs={"dropout": jax.random.key(4)}))

  grad = np.asarray(jax.grad(f)(x))
  out = np.asarray(layer.apply({}, x, deterministic=False,
                               rngs={"dropout": jax.random.key(4)}))
  np.testing.assert_array_equal(grad != 0, out != 0)
  np.testing.assert_allclose(grad[grad != 0], 2.0)


def test_sharded_mask_equals_unsharded():
  mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,))
  x = jnp.ones((16, 32))
  fn = jax.jit(lambda v: dropout.Dropout(0.3).apply(
      {}, v, deterministic=False, rngs={"dropout": jax.random.key(5)}))
  sharded = fn(jax.device_put(x, NamedSharding(mesh, P("data"))))
  np.testing.assert_array_equal(np.asarray(sharded), np.asarray(fn(x)))


def test_used_by_the_models():
  from zoo.models import layers  # pylint: disable=import-outside-toplevel
  assert layers.Dropout is dropout.Dropout
  assert layers.Dropout is not nn.Dropout
