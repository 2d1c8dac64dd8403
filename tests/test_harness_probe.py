"""Tests of zoo.harness.probe: the L2 logistic-regression probe."""

import numpy as np

from zoo.finetune import spec
from zoo.harness import probe

# The recipe stops at a gradient norm of 1e-5, which leaves about 1e-4 of
# stopping error in the unpenalised bias: two fits of one problem reached
# by different rounding agree to that. Comparing a padded fit with its
# unpadded twin needs both solved further, where they agree to ~1e-5.
CONVERGED = probe.Recipe(tol=1e-6, steps=500)


def _blobs(n, f, c, seed=0, spread=3.0):
  rng = np.random.default_rng(seed)
  centers = rng.normal(size=(c, f)) * spread
  labels = rng.integers(0, c, n)
  x = centers[labels] + rng.normal(size=(n, f))
  return x.astype(np.float32), labels.astype(np.int32)


def test_recovers_gaussian_blobs():
  x, y = _blobs(600, 16, 3)
  fitted = probe.fit(x[:400], y[:400], 3)
  assert fitted.layer_weights is None
  assert np.mean(probe.predict(fitted, x[:400]) == y[:400]) == 1.0
  assert np.mean(probe.predict(fitted, x[400:]) == y[400:]) >= 0.95
  p = probe.probabilities(fitted, x[400:])
  assert p.shape == (200, 3) and p.dtype == np.float32
  np.testing.assert_allclose(p.sum(-1), 1.0, atol=1e-5)
  assert probe.predict(fitted, x).dtype == np.int32


def test_scalar_mix_finds_the_signal_layer():
  rng = np.random.default_rng(1)
  x, y = _blobs(500, 12, 3, seed=1, spread=0.6)
  layers = rng.normal(size=(500, 5, 12)).astype(np.float32)
  layers[:, 3] = x
  fitted = probe.fit(layers[:350], y[:350], 3)
  w = fitted.layer_weights
  assert w.shape == (5,) and abs(w.sum() - 1) < 1e-5
  assert w.argmax() == 3 and w[3] > 0.5
  held = np.mean(probe.predict(fitted, layers[350:]) == y[350:])
  alone = probe.fit(x[:350], y[:350], 3)
  assert held >= np.mean(probe.predict(alone, x[350:]) == y[350:]) - 0.05


def test_deterministic():
  x, y = _blobs(200, 8, 4, seed=2, spread=0.5)
  a, b = probe.fit(x, y, 4), probe.fit(x, y, 4)
  np.testing.assert_array_equal(a.weights, b.weights)
  np.testing.assert_array_equal(a.bias, b.bias)


def test_standardised_features_ignore_scale():
  x, y = _blobs(300, 6, 3, seed=3, spread=0.8)
  scaled = x.copy()
  scaled[:, 2] *= 1000.0
  scaled[:, 4] += 50.0
  a = probe.fit(x[:200], y[:200], 3)
  b = probe.fit(scaled[:200], y[:200], 3)
  np.testing.assert_array_equal(probe.predict(a, x[200:]),
                                probe.predict(b, scaled[200:]))
  np.testing.assert_allclose(a.weights, b.weights, atol=1e-3)


def test_constant_feature_is_harmless():
  x, y = _blobs(100, 4, 2, seed=4)
  x[:, 1] = 7.0
  fitted = probe.fit(x, y, 2)
  assert np.all(np.isfinite(fitted.weights))
  assert np.mean(probe.predict(fitted, x) == y) == 1.0


def test_near_widths_share_one_solver_and_fit_as_unpadded(monkeypatch):
  """Wide features (bag-of-words vocabularies of K-shot sets) pad with
  zero columns to a multiple of `WIDTH_STEP`: two widths within one step
  compile one solver, and the fit is the unpadded one's up to rounding."""
  x, y = _blobs(96, 300, 3, seed=5, spread=0.4)
  before = probe._solve._cache_size()
  wide = probe.fit(x, y, 3, CONVERGED)
  narrow = probe.fit(x[:, :290], y, 3, CONVERGED)
  assert probe._solve._cache_size() == before + 1
  assert wide.weights.shape == (300, 3) and narrow.weights.shape == (290, 3)
  monkeypatch.setattr(probe, "WIDTH_STEP", 512)  # 300 columns: no padding
  plain = probe.fit(x, y, 3, CONVERGED)
  assert probe._solve._cache_size() == before + 2
  np.testing.assert_allclose(wide.weights, plain.weights, atol=1e-4)
  np.testing.assert_allclose(wide.bias, plain.bias, atol=1e-4)
  np.testing.assert_array_equal(probe.predict(wide, x),
                                probe.predict(plain, x))


def test_tasks_of_any_size_share_one_solver_and_fit_as_unpadded(monkeypatch):
  """With `row_step`, fits of different N and C (up to `spec.LABEL_WIDTH`
  classes) compile one solver; the padded rows (zero weight) and classes
  (held out of the softmax) leave the fit the unpadded one's, up to
  rounding."""
  rng = np.random.default_rng(8)
  def layered(n, c, seed):
    x, y = _blobs(n, 16, c, seed=seed, spread=0.5)
    return np.stack([x, rng.normal(size=x.shape)], 1).astype(np.float32), y
  (x, y), (x2, y2) = layered(300, 3, 6), layered(200, 5, 7)
  before = probe._solve._cache_size()
  a = probe.fit(x, y, 3, CONVERGED, row_step=512)
  b = probe.fit(x2, y2, 5, CONVERGED, row_step=512)
  assert probe._solve._cache_size() == before + 1
  assert a.weights.shape == (16, 3) and b.bias.shape == (5,)
  assert probe.probabilities(b, x2).shape == (200, 5)
  monkeypatch.setattr(spec, "LABEL_WIDTH", 1)
  plain = probe.fit(x, y, 3, CONVERGED)
  assert probe._solve._cache_size() == before + 2
  for got, want in ((a.weights, plain.weights), (a.bias, plain.bias),
                    (a.layer_weights, plain.layer_weights)):
    np.testing.assert_allclose(got, want, atol=1e-4)
  np.testing.assert_array_equal(probe.predict(a, x), probe.predict(plain, x))
