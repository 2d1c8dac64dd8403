"""Mockingjay at tiny: stacked frames, padding, sharding, shapes."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import model_checks as mc
from zoo import models
from zoo.models import mockingjay


def _frames(b=4, n=48, m=80, seed=0):
  return jnp.asarray(np.random.default_rng(seed).standard_normal((b, n, m)),
                     jnp.float32)


def test_stack_frames_concatenates_r_frames_per_step():
  x = jnp.arange(2 * 7 * 2, dtype=jnp.float32).reshape(2, 7, 2)
  ids = jnp.array([[1] * 7, [1] * 4 + [0] * 3], jnp.int32)
  steps, step_ids = mockingjay.stack_frames(x, ids, 3)
  chex.assert_shape(steps, (2, 2, 6))  # the 7th frame is dropped
  np.testing.assert_array_equal(steps[0, 1], x[0, 3:6].reshape(-1))
  np.testing.assert_array_equal(step_ids, [[1, 1], [1, 1]])
  _, ids2 = mockingjay.stack_frames(x[:, :6], ids[:, :6].at[1, 3].set(0), 3)
  np.testing.assert_array_equal(ids2, [[1, 1], [1, 0]])


def test_outputs_axes_and_sharded_forward():
  config, model = models.make("mockingjay", "tiny", dropout_rate=0.0)
  x = _frames()
  ids = jnp.ones(x.shape[:2], jnp.int32).at[-1, 30:].set(0)
  variables = mc.init(model, x, doc_ids=ids)
  mc.check_logical_axes(variables)
  out = mc.sharded_equals_unsharded(model, variables, x, doc_ids=ids)
  r, d = config.downsample, config.embed_dim
  chex.assert_shape(out["hidden"], (4, 16, d))
  chex.assert_shape(out["reconstruction"], (4, 16, r * 80))
  chex.assert_shape(out["steps"], (4, 16, r * 80))
  assert len(out["layers"]) == config.num_layers + 1
  np.testing.assert_array_equal(out["step_ids"][-1], [1] * 10 + [0] * 6)


def test_padding_never_reaches_real_steps():
  _, model = models.make("mockingjay", "tiny", dropout_rate=0.0)
  x = _frames(b=1)
  ids = jnp.ones(x.shape[:2], jnp.int32).at[:, 30:].set(0)
  variables = mc.init(model, x, doc_ids=ids)
  fwd = jax.jit(lambda v, x: model.apply(v, x, doc_ids=ids)["hidden"])
  noisy = x.at[:, 30:].set(100.0)
  np.testing.assert_allclose(fwd(variables, noisy)[:, :10],
                             fwd(variables, x)[:, :10], atol=1e-5)


def test_bad_frames_are_named():
  _, model = models.make("mockingjay", "tiny")
  x = _frames(m=40)
  with pytest.raises(ValueError, match=r"frames \[B, T, 80\]"):
    jax.eval_shape(model.init, jax.random.key(0), x)
  small = models.make("mockingjay", "tiny", max_len=8)[1]
  with pytest.raises(ValueError, match="exceed max_len 8"):
    jax.eval_shape(small.init, jax.random.key(0), _frames())


def test_positions_are_fixed_codes_or_a_learned_table():
  x = _frames(b=1)
  _, fixed = models.make("mockingjay", "tiny", dropout_rate=0.0)
  params = mc.init(fixed, x)["params"]
  assert "position" not in params  # the paper's fixed sinusoids
  _, learned = models.make("mockingjay", "tiny", positions="learned")
  assert "position" in mc.init(learned, x)["params"]
  _, bad = models.make("mockingjay", "tiny", positions="rotary")
  with pytest.raises(ValueError, match="positions 'rotary'"):
    jax.eval_shape(bad.init, jax.random.key(0), x)
  # Attention alone is blind to order: rolling the steps by one would
  # roll the states. The position codes make it differ.
  h = jax.jit(lambda v, x: fixed.apply(v, x)["hidden"])
  variables = mc.init(fixed, x)
  rolled = h(variables, jnp.roll(x, 3, axis=1))  # one step of 3 frames
  assert np.abs(np.asarray(rolled - jnp.roll(h(variables, x), 1, axis=1))
                ).max() > 1e-3
