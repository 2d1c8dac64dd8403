"""The masked acoustic model: consecutive spans, corruption, L1 loss."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from objectives import acoustic
from objectives import noise
from tests import objective_checks as testing


def _runs(row):
  """(start, length) of each run of True in a bool row."""
  edges = np.diff(np.concatenate([[0], row.astype(int), [0]]))
  starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
  return list(zip(starts, ends - starts))


@pytest.mark.parametrize("span", [1, 3, 7])
def test_spans_cover_the_rate_in_whole_non_overlapping_spans(span):
  n = jnp.array([128, 100, 60, 20, 7, 3] * 50, jnp.int32)
  starts, live, mask = noise.consecutive_spans(jax.random.key(0), n, 128,
                                               0.15, span)
  starts, live, mask = map(np.asarray, (starts, live, mask))
  for i, ni in enumerate(np.asarray(n)):
    k = min(max(round(0.15 * ni / span), 1), ni // span,
            max(1, round(0.15 * 128 / span)))
    assert live[i].sum() == k
    assert mask[i].sum() == k * span and not mask[i, ni:].any()
    s = np.sort(starts[i][live[i]])
    assert (np.diff(s) >= span).all() and (s + span <= ni).all()
  # Placements reach both ends of a row: spans start at 0 and end at n.
  rows = np.asarray(n) == 100
  assert (starts[rows][live[rows]] == 0).any()
  assert (starts[rows][live[rows]] == 100 - span).any()


def _corrupt(steps, ids, **kw):
  args = dict(rate=0.15, span=3, zero_rate=0.8, random_rate=0.1,
              decide="span")
  args.update(kw)
  return acoustic.corrupt_steps(jax.random.key(1), steps, ids, **args)


def _steps(b=64, t=40, w=6):
  x = jax.random.normal(jax.random.key(2), (b, t, w)) + 3.0
  ids = (jnp.arange(t)[None] < jnp.arange(b)[:, None] % 20 + 21)
  return x * ids[..., None], ids.astype(jnp.int32)


def test_zeroed_random_and_kept_spans():
  x, ids = _steps()
  out, chosen = _corrupt(x, ids, zero_rate=1.0, random_rate=0.0)
  np.testing.assert_array_equal(np.asarray(out)[~np.asarray(chosen)],
                                np.asarray(x)[~np.asarray(chosen)])
  assert (np.asarray(out)[np.asarray(chosen)] == 0).all()
  kept, chosen_k = _corrupt(x, ids, zero_rate=0.0, random_rate=0.0)
  np.testing.assert_array_equal(kept, x)
  np.testing.assert_array_equal(chosen_k, chosen)  # the same spans
  moved, _ = _corrupt(x, ids, zero_rate=0.0, random_rate=1.0)
  moved, x_np, c = map(np.asarray, (moved, x, chosen))
  for b in range(x_np.shape[0]):
    n = int(ids[b].sum())
    for start, length in _runs(c[b]):
      for piece in range(start, start + length, 3):
        span = moved[b, piece:piece + 3]
        # A copy of 3 consecutive real steps of the same utterance.
        assert any(np.array_equal(span, x_np[b, s:s + 3])
                   for s in range(n - 2))


def test_decisions_follow_the_rates_per_span_or_per_utterance():
  x, ids = _steps(b=512)
  out, chosen = map(np.asarray, _corrupt(x, ids, rate=0.3))
  zero = (out == 0).all(-1) & chosen
  same = (out == np.asarray(x)).all(-1) & chosen
  assert abs(zero.sum() / chosen.sum() - 0.8) < 0.04
  assert abs(same.sum() / chosen.sum() - 0.1) < 0.04
  out, chosen = map(np.asarray, _corrupt(x, ids, rate=0.3,
                                         decide="utterance"))
  zero = (out == 0).all(-1)
  for b in range(out.shape[0]):
    picked = zero[b][chosen[b]]
    assert picked.all() or not picked.any()


def test_the_loss_is_the_l1_error_of_the_chosen_steps():
  obj = testing.build("mam", "mockingjay")
  batch = testing.speech_batch(seq_len=48, batch_size=4)
  inputs = obj.corrupt(batch, jax.random.key(0))
  recon = jax.random.normal(jax.random.key(1), inputs["steps"].shape)
  parts = obj.score(None, inputs, {"reconstruction": recon}, None, True)
  err = np.abs(np.asarray(recon - inputs["steps"])).mean(-1)
  c = np.asarray(inputs["chosen"])
  np.testing.assert_allclose(parts["mam"]["loss_sum"], err[c].sum(),
                             rtol=1e-5)
  assert parts["mam"]["weight_sum"] == c.sum() > 0


def test_the_masked_acoustic_model_learns_a_fixed_batch():
  obj = testing.build("mam", "mockingjay")
  batch = testing.speech_batch(seq_len=48, batch_size=4)
  out = testing.train(obj, batch, steps=40, lr=3e-3)
  assert out["finite"] and out["last"] < 0.8 * out["first"]


@pytest.mark.parametrize("options,words", [
    ({"decide": "frame"}, "decide 'frame'"), ({"rate": 1.5}, "rate"),
    ({"zero_rate": 0.95, "random_rate": 0.1}, "exceeds 1")])
def test_bad_options_are_named(options, words):
  with pytest.raises(ValueError, match=words):
    testing.build("mam", "mockingjay", **options)
