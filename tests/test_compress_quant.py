"""Q8BERT int8 quantisation: fake-quant math, QAT, export, int8 inference."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import traverse_util

from tests import model_checks as mc
from zoo.compress import quant
from zoo.compress import quant_io
from zoo.models import blocks
from zoo.models import layers

QMAX = 127


def _calibrate(model, params, x, config=quant.QuantConfig()):
  """One fake-quantised apply with mutable stats: the stats it leaves."""
  fn = jax.jit(quant.qat(lambda p, x: model.apply(
      {"params": p}, x, mutable=[quant.STATS])[1][quant.STATS], config))
  return fn(params, x)


@functools.lru_cache(maxsize=None)
def _calibrated(family):
  """(model, params, tokens, stats) of a tiny family, computed once."""
  model, params, x = mc.tiny_model(family)
  return model, params, x, _calibrate(model, params, x)


@functools.lru_cache(maxsize=None)
def _int8_logits(family):
  """The int8 path's logits of `_calibrated(family)`, computed once."""
  model, params, x, stats = _calibrated(family)
  return _logits(quant.int8(model.apply),
                 quant.quantize_params(params, stats), x)


def _logits(apply_fn, variables, x):
  return jax.jit(lambda v, x: apply_fn(v, x)["logits"])(variables, x)


# ------------------------------------------------------------------ math ---


def test_fake_quant_is_identity_on_the_grid_and_rounds_off_it():
  scale = 0.0137
  codes = np.arange(-QMAX, QMAX + 1, dtype=np.float32)
  on_grid = jnp.asarray(codes * scale)
  got = quant.fake_quant(on_grid, QMAX * scale, QMAX)
  np.testing.assert_array_equal(np.asarray(got), np.asarray(on_grid))
  off = on_grid + 0.3 * scale
  moved = np.asarray(quant.fake_quant(off, QMAX * scale, QMAX)) - off
  assert np.abs(moved).max() <= 0.5 * scale + 1e-7
  assert np.abs(moved).max() > 0.2 * scale  # it does round


def test_ste_gradient_is_one_inside_the_range_and_zero_outside():
  amax = 2.0
  x = jnp.array([-3.0, -2.0, -0.77, 0.0, 0.5, 1.999, 2.0, 2.5, 10.0])
  grad = jax.grad(lambda v: jnp.sum(quant.fake_quant(v, amax, QMAX)))(x)
  np.testing.assert_array_equal(np.asarray(grad),
                                [0, 1, 1, 1, 1, 1, 1, 0, 0])
  clipped = quant.fake_quant(x, amax, QMAX)
  assert float(clipped[-1]) == amax and float(clipped[0]) == -amax
  # No gradient reaches the range itself.
  assert float(jax.grad(lambda a: jnp.sum(quant.fake_quant(x, a, QMAX)))(
      amax)) == 0.0


def test_int8_matmul_equals_the_fake_quantised_one():
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.standard_normal((3, 5, 64)), jnp.float32)
  w = jnp.asarray(0.1 * rng.standard_normal((64, 32)), jnp.float32)
  x_amax, w_amax = quant.abs_max(x), quant.abs_max(w)
  sx, sw = quant.scale_of(x_amax, QMAX), quant.scale_of(w_amax, QMAX)
  got = quant.int8_matmul(x, quant.quantize(w, sw, QMAX),
                          (((2,), (0,)), ((), ())), sx, sw, QMAX)
  # Integer codes multiply exactly in float32 too: bit for bit.
  codes = (quant.fake_codes(x, x_amax, QMAX) @
           quant.fake_codes(w, w_amax, QMAX)) * (sx * sw)
  np.testing.assert_array_equal(np.asarray(got), np.asarray(codes))
  # Dequantised operands differ only by float rounding of the products.
  fake = quant.fake_quant(x, x_amax, QMAX) @ quant.fake_quant(w, w_amax,
                                                               QMAX)
  np.testing.assert_allclose(got, fake, rtol=0, atol=1e-5 * float(
      jnp.abs(fake).max()))
  # fake_codes carries the straight-through gradient scaled by 1/s.
  grad = jax.grad(lambda v: jnp.sum(quant.fake_codes(v, x_amax, QMAX)))(x)
  np.testing.assert_allclose(grad, np.full(x.shape, 1 / sx), rtol=1e-6)


def test_config_rejects_bad_bits_and_decay():
  with pytest.raises(ValueError, match="bits"):
    quant.QuantConfig(bits=9)
  with pytest.raises(ValueError, match="ema_decay"):
    quant.QuantConfig(ema_decay=1.0)


# ------------------------------------------------------- statistics, EMA ---


def test_ema_updates_where_mutable_and_freezes_where_not():
  dense = layers.Dense(3, ("embed", "mlp"))
  params = {"kernel": jnp.ones((4, 3)), "bias": jnp.zeros(3)}
  config = quant.QuantConfig(ema_decay=0.9)
  apply = quant.qat(dense.apply, config)
  _, s1 = apply({"params": params}, jnp.full((2, 4), 2.0),
                mutable=[quant.STATS])
  assert float(s1[quant.STATS]["input_amax"]) == 2.0  # first: the batch
  _, s2 = apply({"params": params, **s1}, jnp.full((2, 4), -5.0),
                mutable=[quant.STATS])
  np.testing.assert_allclose(s2[quant.STATS]["input_amax"],
                             0.9 * 2.0 + 0.1 * 5.0, rtol=1e-6)
  # Frozen: the stored range clips the input (|x| = 5 > 2.3).
  y = apply({"params": params, **s2}, jnp.full((1, 4), 5.0))
  np.testing.assert_allclose(y, 4 * 2.3 * np.ones((1, 3)), rtol=1e-2)
  with pytest.raises(ValueError, match="mutable"):
    apply({"params": params}, jnp.ones((1, 4)))


def test_qat_mlm_step_trains_and_moves_stats():
  model, params, x, stats = _calibrated("bert")
  config = quant.QuantConfig(ema_decay=0.9)
  tx = optax.adam(1e-2)

  @jax.jit
  def step(params, stats, opt, x):
    def loss_fn(p):
      out, new = quant.qat(model.apply, config)(
          {"params": p, quant.STATS: stats}, x, mutable=[quant.STATS])
      logp = jax.nn.log_softmax(out["logits"])
      nll = -jnp.take_along_axis(logp, x[..., None], -1)
      return jnp.mean(nll), new[quant.STATS]
    (loss, new), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    updates, opt = tx.update(grads, opt, params)
    return optax.apply_updates(params, updates), new, opt, loss

  opt = tx.init(params)
  losses = []
  for _ in range(3):
    params, new_stats, opt, loss = step(params, stats, opt, x)
    losses.append(float(loss))
    moved = jax.tree.map(lambda a, b: float(jnp.abs(a - b).max()),
                         new_stats, stats)
    stats = new_stats
  assert np.all(np.isfinite(losses)) and losses[-1] < losses[0]
  wi = moved["encoder"]["layer_1"]["mlp"]["wi"]["input_amax"]
  assert wi > 0.0  # the params moved, so the inputs' max moved the EMA


# ----------------------------------------- int8 inference and the export ---


def _count_quantised(params):
  leaves = jax.tree.leaves(params)
  return sum(a.dtype == jnp.int8 for a in leaves)


@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_int8_path_is_close_to_fake_quant(family):
  model, params, x, stats = _calibrated(family)
  fake = _logits(quant.qat(model.apply),
                 {"params": params, quant.STATS: stats}, x)
  qvars = quant.quantize_params(params, stats)
  quant_io.check_quantized(qvars)
  got = _int8_logits(family)
  float_logits = _logits(model.apply, {"params": params}, x)
  # Every Dense (query/key/value/out, wi/wo per layer) and every table.
  dense = 6 * 2 + (3 if family == "bert" else 0)  # pooler, nsp, transform
  tables = 3 if family == "bert" else 2
  assert _count_quantised(qvars["params"]) == dense + tables
  # Both paths multiply the same integer codes (exactly: see the test
  # above), but the two compiled programs round the float ops around the
  # matmuls (LayerNorm, GELU, fused multiply-adds) by an ulp here and
  # there; now and then that moves an activation across a rounding
  # boundary of the next quantiser, one code moves by one step and the
  # logits of that position by a few output steps. So most positions
  # agree to float rounding, and the rest by far less than quantisation
  # itself moved the logits.
  diff = np.abs(np.asarray(got - fake)).max(-1)  # [B, T]
  scale = float(np.abs(np.asarray(fake)).max())
  assert np.mean(diff <= 1e-5 * scale) >= 0.9
  qerror = float(np.abs(np.asarray(fake - float_logits)).max())
  assert qerror > 1e-3  # quantisation does change the model ...
  assert diff.max() <= 0.5 * qerror  # ... and int8 is fake-quant's twin


def test_scanned_stack_carries_stats_and_matches_the_unrolled_one():
  _, params, x, stats = _calibrated("bert")
  scan_model, _, _ = mc.tiny_model("bert", scan_layers=True)
  per_layer = [params["encoder"][f"layer_{i}"] for i in range(2)]
  scan_params = dict(params, encoder={
      "layers": blocks.stack_layer_params(per_layer)})
  scan_stats = _calibrate(scan_model, scan_params, x)
  stacked = scan_stats["encoder"]["layers"]["block"]["mlp"]["wo"]
  np.testing.assert_allclose(
      stacked["input_amax"],
      [stats["encoder"][f"layer_{i}"]["mlp"]["wo"]["input_amax"]
       for i in range(2)], rtol=1e-6)
  want = _int8_logits("bert")
  got = _logits(quant.int8(scan_model.apply),
                quant.quantize_params(scan_params, scan_stats), x)
  np.testing.assert_allclose(got, want, atol=1e-5)


def test_export_round_trip_is_exact(tmp_path):
  model, params, x, stats = _calibrated("bert")
  qvars = quant.quantize_params(params, stats)
  path = tmp_path / "int8.safetensors"
  quant_io.save(path, qvars)
  loaded = quant_io.load(path)
  assert jax.tree.structure(loaded) == jax.tree.structure(qvars)
  for a, b in zip(jax.tree.leaves(loaded), jax.tree.leaves(qvars)):
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  kernel = loaded["params"]["encoder"]["layer_0"]["mlp"]["wi"]["kernel"]
  assert kernel.dtype == jnp.int8
  np.testing.assert_array_equal(
      _logits(quant.int8(model.apply), loaded, x), _int8_logits("bert"))


# ------------------------------------------------------------------ errors ---


def test_load_refuses_missing_scales_and_foreign_files(tmp_path):
  _, params, _, stats = _calibrated("gpt2")
  qvars = quant.quantize_params(params, stats)
  broken = jax.tree.map(lambda a: a, qvars)
  del broken[quant.SCALES]["token"]["embedding_scale"]
  with pytest.raises(ValueError, match="has no scale"):
    quant_io.save(tmp_path / "x.safetensors", broken)
  path = tmp_path / "q.safetensors"
  quant_io.save(path, qvars)
  import safetensors.numpy  # pylint: disable=import-outside-toplevel
  tensors = safetensors.numpy.load_file(str(path))
  del tensors["quant_scales/token/embedding_scale"]
  safetensors.numpy.save_file(tensors, str(path),
                              metadata={"format": quant_io.FORMAT})
  with pytest.raises(ValueError, match="token/embedding has no scale"):
    quant_io.load(path)
  safetensors.numpy.save_file(tensors, str(path))
  with pytest.raises(ValueError, match="not an int8 export"):
    quant_io.load(path)
  orphan = jax.tree.map(lambda a: a, qvars)
  orphan["params"]["token"]["embedding"] = params["token"]["embedding"]
  with pytest.raises(ValueError, match="no int8 param"):
    quant_io.check_quantized(orphan)


def test_int8_apply_refuses_float_params_and_stats_must_match():
  model, params, x, stats = _calibrated("gpt2")
  qvars = quant.quantize_params(params, stats)
  qvars["params"]["decoder"]["layer_0"]["mlp"]["wi"]["kernel"] = (
      params["decoder"]["layer_0"]["mlp"]["wi"]["kernel"])
  with pytest.raises(ValueError, match="int8 weights"):
    quant.int8(model.apply)(qvars, x)
  bad = dict(stats, nowhere={"input_amax": jnp.ones(())})
  with pytest.raises(ValueError, match="no 'kernel'"):
    quant.quantize_params(params, bad)


def test_a_familys_own_scan_is_refused_with_a_clear_error():
  model, params, x = mc.tiny_model("xlnet", scan_layers=True)
  with pytest.raises(ValueError, match="scan_layers=False"):
    _calibrate(model, params, x)


def test_qat_without_embeddings_leaves_tables_float():
  model, params, x = mc.tiny_model("bert")
  config = dataclasses.replace(quant.QuantConfig(), embeddings=False)
  stats = _calibrate(model, params, x, config)
  qvars = quant.quantize_params(params, stats, config)
  assert qvars["params"]["embeddings"]["token"]["embedding"].dtype == (
      jnp.float32)
  names = {k[-1] for k in traverse_util.flatten_dict(stats)}
  assert names == {"input_amax"}
