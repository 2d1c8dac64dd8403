"""Post-training calibration (`zoo.compress.calibration`)."""

import types

import jax
import numpy as np

from tests import model_checks as mc
from zoo.compress import calibration
from zoo.compress import quant


def _apply(model, variables, x, config):
  with quant.fake_quantized(config):
    return model.apply(variables, x, mutable=[quant.STATS])[1][quant.STATS]


def test_calibration_is_the_moving_max_over_its_batches():
  model, params, x = mc.tiny_model("bert")
  config = quant.QuantConfig(ema_decay=0.5)
  y = (x + 3) % 50
  got = calibration.calibrate(model, params, [{"tokens": x}, {"tokens": y}],
                              config)
  first = _apply(model, {"params": params}, x, config)
  want = _apply(model, {"params": params, quant.STATS: first}, y, config)
  jax.tree_util.tree_map(
      lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), got, want)
  assert not all(jax.tree_util.tree_leaves(jax.tree_util.tree_map(
      lambda a, b: np.allclose(a, b), got, first)))


def test_calibration_takes_the_params_as_arguments(monkeypatch):
  """Params closed over become constants that XLA folds at compile time
  (minutes for an embedding table); every program must take them."""
  model, params, x = mc.tiny_model("bert")
  texts = []

  def spy(fn):
    jitted = jax.jit(fn)

    def call(*args):
      texts.append(jitted.lower(*args).as_text())
      return jitted(*args)
    return call

  monkeypatch.setattr(calibration, "jax", types.SimpleNamespace(jit=spy))
  calibration.calibrate(model, params, [{"tokens": x}] * 2)
  vocab, width = params["embeddings"]["token"]["embedding"].shape
  table = f"tensor<{vocab}x{width}xf32>"
  assert len(texts) == 2
  for text in texts:
    main = next(line for line in text.splitlines() if "@main(" in line)
    assert table in main
    assert not any("constant" in line and table in line
                   for line in text.splitlines())
