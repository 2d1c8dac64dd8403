"""Tests of zoo.harness.statistics: bootstrap, pairing, Kendall's tau."""

import itertools

import numpy as np
import pytest

from data.tasks import metrics
from zoo.harness import statistics as st


def test_bernoulli_interval_matches_normal():
  rng = np.random.default_rng(0)
  n, p = 400, 0.3
  labels = np.ones(n, np.int32)
  preds = (np.arange(n) < int(p * n)).astype(np.int32)[rng.permutation(n)]
  iv, reps = st.summarize(preds[None], labels, "accuracy", seed=1,
                          n_boot=2000)
  half = 100 * 1.96 * np.sqrt(p * (1 - p) / n)
  assert iv.mean == pytest.approx(100 * p)
  assert reps.shape == (2000,)
  assert abs(iv.low - (100 * p - half)) < 1.5
  assert abs(iv.high - (100 * p + half)) < 1.5


@pytest.mark.parametrize("metric", ["accuracy", "f1"])
def test_point_matches_task_metrics(metric):
  rng = np.random.default_rng(1)
  preds = rng.integers(0, 2, (3, 200))
  labels = rng.integers(0, 2, 200)
  want = np.mean([metrics.compute(metric, list(p), list(labels))[metric]
                  for p in preds])
  assert st.point(preds, labels, metric) == pytest.approx(want, abs=1e-9)


def test_point_mean_and_replicates_shape():
  scores = np.array([[1.0, 0.5, 0.0, 1.0]])
  assert st.point(scores, None, "mean") == pytest.approx(62.5)
  reps = st.replicates(scores, None, "mean", n_boot=50)
  assert reps.shape == (50,) and np.all((reps >= 0) & (reps <= 100))


def test_f1_replicates_match_loop():
  rng = np.random.default_rng(2)
  preds, labels = rng.integers(0, 2, (2, 60)), rng.integers(0, 2, 60)
  reps = st.replicates(preds, labels, "f1", n_boot=20, seed=3)
  rows, picks = st._indices(3, 60, 2, 20)  # pylint: disable=protected-access
  want = [np.mean([metrics.f1(preds[s][r], labels[r])["f1"] for s in ps])
          for r, ps in zip(rows, picks)]
  np.testing.assert_allclose(reps, want, atol=1e-9)


def test_identical_rows_pair_to_zero():
  rng = np.random.default_rng(3)
  preds, labels = rng.integers(0, 4, (2, 300)), rng.integers(0, 4, 300)
  a = st.summarize(preds, labels, "accuracy", seed=5)
  b = st.summarize(preds.copy(), labels, "accuracy", seed=5)
  diff = st.paired((a[0].mean, a[1]), (b[0].mean, b[1]))
  assert diff.to_json() == [0.0, 0.0, 0.0]
  assert not diff.excludes_zero


def _row(labels, accuracy, rng, s=1):
  """Predictions [S, N] right on a fraction `accuracy` of the examples."""
  n = len(labels)
  right = rng.random((s, n)) < accuracy
  return np.where(right, labels[None], 1 - labels[None])


def test_better_row_excludes_zero_tiny_does_not():
  rng = np.random.default_rng(4)
  labels = rng.integers(0, 2, 500)
  base = _row(labels, 0.7, rng)
  better = np.where(rng.random(500) < 0.5, labels, base[0])[None]
  tiny = base.copy()
  flip = np.flatnonzero(tiny[0] != labels)[:1]  # one more right answer
  tiny[0, flip] = labels[flip]
  parts = {k: st.summarize(v, labels, "accuracy", seed=0)
           for k, v in dict(base=base, better=better, tiny=tiny).items()}
  pair = lambda x, y: st.paired((parts[x][0].mean, parts[x][1]),
                                (parts[y][0].mean, parts[y][1]))
  assert pair("better", "base").excludes_zero
  assert pair("better", "base").low > 5
  assert not pair("tiny", "base").excludes_zero


def test_identical_seeds_equal_single_seed():
  rng = np.random.default_rng(5)
  labels = rng.integers(0, 3, 250)
  one = rng.integers(0, 3, (1, 250))
  three = np.repeat(one, 3, axis=0)
  i1, r1 = st.summarize(one, labels, "accuracy", seed=7)
  i3, r3 = st.summarize(three, labels, "accuracy", seed=7)
  np.testing.assert_allclose(r1, r3, atol=1e-9)
  assert i1.to_json() == pytest.approx(i3.to_json())


def test_replicates_depend_only_on_seed_n_s():
  rng = np.random.default_rng(6)
  labels = rng.integers(0, 2, 100)
  preds = rng.integers(0, 2, (2, 100))
  a = st.replicates(preds, labels, "accuracy", seed=11)
  b = st.replicates(preds, labels, "accuracy", seed=11)
  c = st.replicates(preds, labels, "accuracy", seed=12)
  np.testing.assert_array_equal(a, b)
  assert not np.array_equal(a, c)


def test_average_of_tasks():
  a = (50.0, np.array([40.0, 50.0, 60.0]))
  b = (70.0, np.array([60.0, 80.0, 70.0]))
  iv, reps = st.average([a, b])
  assert iv.mean == 60.0
  np.testing.assert_array_equal(reps, [50.0, 65.0, 65.0])


def _brute_tau(x, y):
  conc = disc = tx = ty = 0
  for i, j in itertools.combinations(range(len(x)), 2):
    dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
    conc += dx * dy > 0
    disc += dx * dy < 0
    tx += dx == 0
    ty += dy == 0
  n0 = len(x) * (len(x) - 1) / 2
  return (conc - disc) / np.sqrt((n0 - tx) * (n0 - ty))


def test_kendall_tau_matches_brute_force():
  rng = np.random.default_rng(7)
  for _ in range(20):
    x, y = rng.integers(0, 5, 12), rng.integers(0, 4, 12)
    assert st.kendall_tau(x, y) == pytest.approx(_brute_tau(x, y), abs=1e-12)
  assert st.kendall_tau([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
  assert st.kendall_tau([1, 1, 1], [1, 2, 3]) == 0.0


def test_tau_interval_contains_point():
  rng = np.random.default_rng(8)
  labels = rng.integers(0, 2, 300)
  accs = [0.55, 0.6, 0.7, 0.72, 0.9]
  rows = [st.summarize(_row(labels, a, rng), labels, "accuracy", seed=2)
          for a in accs]
  reps = np.stack([r for _, r in rows], axis=1)
  points = [iv.mean for iv, _ in rows]
  iv = st.tau_interval(reps, np.arange(5), points)
  assert iv.low <= iv.mean <= iv.high
  assert -1 <= iv.low and iv.high <= 1
  assert iv.mean == pytest.approx(st.kendall_tau(points, np.arange(5)))
