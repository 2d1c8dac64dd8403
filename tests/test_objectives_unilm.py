"""unilm: per-row masks, cloze loss, training; quick_thought: contrastive."""

import math

import jax
import numpy as np

from objectives import quick_thought
from objectives import segments
from tests import objective_checks as testing
from zoo.models import masks
import pytest


def test_unilm_modes_and_masks():
  batch = testing.tiny_batch(seq_len=64, batch_size=32)
  obj = testing.build("unilm", "bert")
  inputs = jax.jit(obj.corrupt)(batch, jax.random.key(0))
  modes = np.asarray(inputs["modes"])
  assert set(modes) == {0, 1, 2, 3}
  _, kw = obj.model_inputs(inputs)
  att = np.asarray(kw["mask"])
  assert att.shape == (32, 64, 64)
  causal = np.tril(np.ones((64, 64), bool))
  pre = np.asarray(inputs["prefix"])
  for r in range(32):
    if modes[r] == 0:
      assert att[r].all()
    elif modes[r] == 1:
      np.testing.assert_array_equal(att[r], causal)
    elif modes[r] == 2:
      np.testing.assert_array_equal(att[r], causal.T)  # right-to-left
    else:
      np.testing.assert_array_equal(
          att[r], np.asarray(masks.prefix_lm_mask(pre[r:r + 1]))[0])
      assert not att[r][np.ix_(pre[r], ~pre[r])].any()  # source: no target


def test_unilm_mixes_modes_as_the_paper():
  """Bidirectional 1/3, left-to-right 1/6, right-to-left 1/6, seq2seq 1/3
  (Dong et al. 2019, section 2.3)."""
  batch = testing.tiny_batch(seq_len=16, batch_size=8)
  obj = testing.build("unilm", "bert")
  corrupt = jax.jit(obj.corrupt)
  modes = np.concatenate([np.asarray(corrupt(batch, jax.random.key(s))[
      "modes"]) for s in range(300)])
  freq = np.bincount(modes, minlength=4) / len(modes)
  np.testing.assert_allclose(freq, [1 / 3, 1 / 6, 1 / 6, 1 / 3], atol=0.03)


def test_unilm_rejects_bad_probs():
  try:
    testing.build("unilm", "bert", mode_probs=(1.0, 0.0, 0.0))
  except ValueError as e:
    assert "mode_probs" in str(e)
  else:
    raise AssertionError("accepted two mode weights")


@pytest.mark.slow
def test_unilm_trains():
  testing.check(testing.build("unilm", "bert"), testing.tiny_batch())


def test_sentence_means():
  h = np.arange(12, dtype=np.float32).reshape(1, 6, 2)
  sent = np.array([[1, 1, 2, 2, 2, 0]])
  means, valid = quick_thought.sentence_means(h, sent, 3)
  np.testing.assert_allclose(means[0, 0], [1, 2])
  np.testing.assert_allclose(means[0, 1], [6, 7])
  np.testing.assert_array_equal(valid[0], [True, True, False])


@pytest.mark.slow
def test_quick_thought_trains():
  batch = testing.tiny_batch()
  obj = testing.build("quick_thought", "bert")
  out = testing.check(obj, batch, uniform=False, lr=3e-3)
  m = out["metrics"]
  # One target per sentence and existing neighbour in the same document.
  sent = np.asarray(segments.sentence_index(batch))
  doc = np.asarray(batch["doc_ids"])
  pairs = 0
  for r in range(sent.shape[0]):
    first = {s: doc[r][sent[r] == s][0] for s in np.unique(sent[r]) if s}
    pairs += sum(first.get(s + 1) == d for s, d in first.items())
  assert m["next_weight_sum"] == m["previous_weight_sum"] == pairs > 0
  assert m["weight_sum"] == 2 * pairs
  assert math.isfinite(out["first"])


@pytest.mark.slow
def test_unilm_gathered_head_loss_equals_full_logits_loss():
  obj = testing.build("unilm", "unilm", model_args={"dropout_rate": 0.1})
  testing.assert_gathered_loss_matches(obj, testing.tiny_batch())
