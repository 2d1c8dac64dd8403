"""unilm: per-row masks, cloze loss, training; quick_thought: contrastive."""

import math

import jax
import numpy as np

from objectives import quick_thought
from objectives import segments
from objectives import testing


def test_unilm_modes_and_masks():
  batch = testing.tiny_batch(seq_len=64, batch_size=32)
  obj = testing.build("unilm", "bert")
  inputs = jax.jit(obj.corrupt)(batch, jax.random.key(0))
  modes = np.asarray(inputs["modes"])
  assert set(modes) == {0, 1, 2}
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
    else:
      np.testing.assert_array_equal(
          att[r], np.asarray(segments.prefix_attention(pre[r:r + 1]))[0])
      assert not att[r][np.ix_(pre[r], ~pre[r])].any()  # source: no target


def test_unilm_rejects_bad_probs():
  try:
    testing.build("unilm", "bert", mode_probs=(1.0, 0.0))
  except ValueError as e:
    assert "mode_probs" in str(e)
  else:
    raise AssertionError("accepted two mode weights")


def test_unilm_trains():
  testing.check(testing.build("unilm", "bert"), testing.tiny_batch())


def test_sentence_means():
  h = np.arange(12, dtype=np.float32).reshape(1, 6, 2)
  sent = np.array([[1, 1, 2, 2, 2, 0]])
  means, valid = quick_thought.sentence_means(h, sent, 3)
  np.testing.assert_allclose(means[0, 0], [1, 2])
  np.testing.assert_allclose(means[0, 1], [6, 7])
  np.testing.assert_array_equal(valid[0], [True, True, False])


def test_quick_thought_trains():
  batch = testing.tiny_batch()
  obj = testing.build("quick_thought", "bert")
  out = testing.check(obj, batch, uniform=False, lr=3e-3)
  m = out["metrics"]
  n_sent = int(np.asarray(jax.jit(obj.corrupt)(batch, jax.random.key(0))[
      "sent_docs"] > 0).sum())
  # Near-uniform over the other sentences of the batch at init.
  assert abs(m["loss_sum"] / m["weight_sum"] - math.log(n_sent - 1)) < 0.5
  assert m["next_weight_sum"] == m["previous_weight_sum"] > 0
