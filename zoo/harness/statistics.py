"""Bootstrap intervals, paired differences and rank correlation of scores.

Every score is in [0, 100]. The harness holds, per (row, view, task),
predictions `preds` [S, N] (S seeds or sampled training subsets, N evaluation
examples), gold `labels` [N] and a metric name:

  "accuracy": percent of `preds == labels`.
  "f1": F1 of class 1 in percent (binary), as `data.tasks.metrics.f1`.
  "mean": 100 * mean of `preds` (per-example scores such as the 1/0.5/0
    outcomes of minimal pairs); `labels` are ignored.

A replicate resamples the N examples with replacement (one set of indices
shared by every seed) and the S seeds with replacement, and averages the
metric of the resampled seeds on the resampled examples. The example indices
depend only on `(seed, N)` and the seed indices only on `(seed, S)`, drawn
from independent streams: two rows with the same N evaluated with the same
`seed` see the same resampled examples, even when their S differ (1 seed
against 3), and that is what makes `paired` differences paired. Each row's
seed resampling is its own noise and widens the difference accordingly.

Letters: N examples, S seeds, R rows, B bootstrap replicates.
"""

import dataclasses

import numpy as np

LEVEL = 0.95
N_BOOT = 1000
METRICS = ("accuracy", "f1", "mean")


@dataclasses.dataclass(frozen=True)
class Interval:
  """A point value and its bootstrap interval.

  Attributes:
    mean: the point value (on all examples and seeds, not a replicate mean).
    low: lower bound of the interval.
    high: upper bound of the interval.
  """
  mean: float
  low: float
  high: float

  @property
  def excludes_zero(self) -> bool:
    """Whether 0 lies strictly outside `[low, high]`."""
    return self.low > 0 or self.high < 0

  def to_json(self) -> list[float]:
    """`[mean, low, high]` as plain floats."""
    return [float(self.mean), float(self.low), float(self.high)]


def _check(preds, labels, metric: str) -> tuple[np.ndarray, np.ndarray | None]:
  """`preds` as [S, N] and `labels` as [N] (None for "mean")."""
  if metric not in METRICS:
    raise ValueError(f"unknown metric {metric!r}; known: {METRICS}")
  preds = np.asarray(preds)
  preds = preds[None] if preds.ndim == 1 else preds
  if preds.ndim != 2 or preds.shape[1] == 0:
    raise ValueError(f"preds must be [S, N] with N > 0, got {preds.shape}")
  if metric == "mean":
    return preds.astype(np.float64), None
  labels = np.asarray(labels)
  if labels.shape != preds.shape[1:]:
    raise ValueError(f"labels {labels.shape} for preds {preds.shape}")
  return preds, labels


def _per_seed(counts: np.ndarray, preds: np.ndarray, labels, metric: str):
  """Metric of every seed on every weighting of the examples.

  Args:
    counts: float64 [B, N], how many times each example is drawn.
    preds: [S, N] predictions (float64 scores for "mean").
    labels: [N] gold labels, or None for "mean".
    metric: one of `METRICS`.

  Returns:
    float64 [B, S] scores in [0, 100].
  """
  if metric == "mean":
    return 100.0 * (counts @ preds.T) / counts.sum(1, keepdims=True)
  if metric == "accuracy":
    correct = (preds == labels[None]).astype(np.float64)
    return 100.0 * (counts @ correct.T) / counts.sum(1, keepdims=True)
  p, l = preds == 1, (labels == 1)[None]
  tp = counts @ (p & l).astype(np.float64).T
  positives = counts @ p.astype(np.float64).T + counts @ l.astype(np.float64).T
  return 100.0 * 2 * tp / np.maximum(positives, 1)


def point(preds, labels, metric: str) -> float:
  """Mean over seeds of the metric on all N examples.

  Args:
    preds: [S, N] (or [N] for one seed) predictions.
    labels: [N] gold labels (ignored for "mean").
    metric: "accuracy", "f1" or "mean".

  Returns:
    The score in [0, 100].
  """
  preds, labels = _check(preds, labels, metric)
  counts = np.ones((1, preds.shape[1]))
  return float(_per_seed(counts, preds, labels, metric).mean())


def _indices(seed: int, n: int, s: int, n_boot: int):
  """Example indices int [B, N] and seed indices int [B, S] of `seed`."""
  examples, seeds = np.random.SeedSequence(seed).spawn(2)
  rows = np.random.default_rng(examples).integers(0, n, (n_boot, n))
  picks = np.random.default_rng(seeds).integers(0, s, (n_boot, s))
  return rows, picks


def replicates(preds, labels, metric: str, n_boot: int = N_BOOT,
               seed: int = 0) -> np.ndarray:
  """Bootstrap replicates of `point` over examples and seeds.

  Args:
    preds: [S, N] (or [N]) predictions.
    labels: [N] gold labels (ignored for "mean").
    metric: "accuracy", "f1" or "mean".
    n_boot: B, the number of replicates.
    seed: the resampling seed; equal seeds and N give equal example indices.

  Returns:
    float64 [B]: per replicate, the mean over resampled seeds of the metric
    on the resampled examples.
  """
  preds, labels = _check(preds, labels, metric)
  s, n = preds.shape
  rows, picks = _indices(seed, n, s, n_boot)
  offsets = (rows + n * np.arange(n_boot)[:, None]).ravel()
  counts = np.bincount(offsets, minlength=n_boot * n).reshape(n_boot, n)
  scores = _per_seed(counts.astype(np.float64), preds, labels, metric)
  return np.take_along_axis(scores, picks, axis=1).mean(1)


def interval(point_value: float, reps, level: float = LEVEL) -> Interval:
  """The percentile interval of `reps` [B] at `level`, around `point_value`.

  The bounds are the (1 - level) / 2 and (1 + level) / 2 quantiles of the
  replicates, widened to contain the point value when the replicates lie
  all on one side of it (as for a tau of 1, or a score of 100).
  """
  reps = np.asarray(reps, np.float64)
  tail = 100.0 * (1.0 - level) / 2
  low, high = np.percentile(reps, [tail, 100.0 - tail])
  point_value = float(point_value)
  return Interval(point_value, float(min(low, point_value)),
                  float(max(high, point_value)))


def summarize(preds, labels, metric: str, seed: int = 0,
              n_boot: int = N_BOOT,
              level: float = LEVEL) -> tuple[Interval, np.ndarray]:
  """The interval of one (row, view, task) and its replicates [B]."""
  reps = replicates(preds, labels, metric, n_boot=n_boot, seed=seed)
  return interval(point(preds, labels, metric), reps, level), reps


def average(parts: list[tuple[float, np.ndarray]],
            level: float = LEVEL) -> tuple[Interval, np.ndarray]:
  """The mean over tasks, from each task's (point value, replicates [B]).

  Tasks are independent samples, so the replicate of the mean is the mean
  of the tasks' replicates, index by index.

  Returns:
    (interval, replicates float64 [B]).
  """
  if not parts:
    raise ValueError("average of no parts")
  value = float(np.mean([p for p, _ in parts]))
  reps = np.mean(np.stack([np.asarray(r, np.float64) for _, r in parts]), 0)
  return interval(value, reps, level), reps


def paired(a: tuple[float, np.ndarray], b: tuple[float, np.ndarray],
           level: float = LEVEL) -> Interval:
  """The difference a - b, each a (point value, replicates [B]).

  Both sides' replicates must come from the same resampling `seed` (and N),
  so that replicate i of each scores the same examples.
  """
  ra, rb = np.asarray(a[1], np.float64), np.asarray(b[1], np.float64)
  if ra.shape != rb.shape:
    raise ValueError(f"replicates {ra.shape} and {rb.shape} do not pair")
  return interval(float(a[0]) - float(b[0]), ra - rb, level)


def _tau_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
  """Kendall's tau-b of each row of x [B, R] against y [R]; float64 [B].

  A row (or y) with every value tied has no ordering; its tau is 0.
  """
  sx = np.sign(x[:, :, None] - x[:, None, :]).astype(np.int8)
  sy = np.sign(y[:, None] - y[None, :]).astype(np.int8)
  concord = np.einsum("bij,ij->b", sx, sy, dtype=np.float64)
  untied_x = np.einsum("bij,bij->b", sx, sx, dtype=np.float64)
  untied_y = float(np.einsum("ij,ij->", sy, sy, dtype=np.float64))
  denom = np.sqrt(untied_x * untied_y)
  return np.where(denom > 0, concord / np.where(denom > 0, denom, 1), 0.0)


def kendall_tau(x, y) -> float:
  """Kendall's tau-b of x [R] and y [R] (ties counted), in [-1, 1].

  0 when x or y is constant.
  """
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  if x.shape != y.shape or x.ndim != 1:
    raise ValueError(f"kendall_tau of shapes {x.shape} and {y.shape}")
  return float(_tau_rows(x[None], y)[0])


def tau_interval(row_reps, reference, point_values,
                 level: float = LEVEL) -> Interval:
  """Tau of the rows' ordering against a reference, with its interval.

  Args:
    row_reps: [B, R] replicates of R rows, all drawn with the same seed.
    reference: [R] the reference scores (e.g. a published ordering).
    point_values: [R] the rows' point values.
    level: the interval's coverage.

  Returns:
    The tau of `point_values` and the percentile interval of the
    replicates' taus.
  """
  row_reps = np.asarray(row_reps, np.float64)
  reference = np.asarray(reference, np.float64)
  if row_reps.ndim != 2 or row_reps.shape[1] != reference.shape[0]:
    raise ValueError(f"row_reps {row_reps.shape} for {reference.shape} rows")
  taus = _tau_rows(row_reps, reference)
  return interval(kendall_tau(point_values, reference), taus, level)
