"""clm, prefix_lm and bilm: targets, documents, init loss, training."""

import jax
import jax.numpy as jnp
import numpy as np

from objectives import common
from tests import objective_checks as testing
import pytest


def test_next_token_targets_stop_at_documents():
  tok = jnp.array([[5, 6, 1, 7, 8, 1, 0]])
  doc = jnp.array([[1, 1, 1, 2, 2, 2, 0]])
  targets, weights = common.next_token_targets(tok, doc)
  np.testing.assert_array_equal(targets[0, :5], [6, 1, 7, 8, 1])
  np.testing.assert_array_equal(weights[0], [1, 1, 0, 1, 1, 0, 0])


def test_shift_right_restarts_per_segment():
  tok = jnp.array([[5, 6, 1, 7, 1, 0]])
  seg = jnp.array([[1, 1, 1, 2, 2, 0]])
  np.testing.assert_array_equal(common.shift_right(tok, seg, 0)[0],
                                [0, 5, 6, 0, 7, 0])


def test_clm_gpt2():
  batch = testing.tiny_batch()
  obj = testing.build("clm", "gpt2")
  assert obj.interface == "decoder"
  out = testing.check(obj, batch)
  doc = np.asarray(batch["doc_ids"])
  want = ((doc[:, 1:] == doc[:, :-1]) & (doc[:, :-1] > 0)).sum()
  assert out["metrics"]["weight_sum"] == want


@pytest.mark.slow
def test_clm_never_sees_the_next_document():
  obj = testing.build("clm", "bert")  # an encoder under a causal mask
  batch = testing.tiny_batch()
  params = common.nn.meta.unbox(obj.init(jax.random.key(0), batch))
  other = dict(batch, tokens=jnp.where(batch["doc_ids"] >= 2, 9,
                                       batch["tokens"]))
  run = jax.jit(lambda b: obj.run(params, common.as_batch(b), None,
                                  True)["logits"])
  first = np.asarray(batch["doc_ids"]) == 1
  later = np.asarray(batch["doc_ids"]) >= 2
  a, b = np.asarray(run(batch)), np.asarray(run(other))
  np.testing.assert_allclose(a[first], b[first], atol=1e-5)
  assert np.abs(a[later] - b[later]).max() > 1e-3
  # Causal: a document's first piece ignores its second.
  third = dict(batch, tokens=batch["tokens"].at[:, 1].set(11))
  np.testing.assert_allclose(np.asarray(run(third))[:, 0], a[:, 0],
                             atol=1e-5)


def test_prefix_lm_encoder_mask_bert():
  batch = testing.tiny_batch()
  obj = testing.build("prefix_lm", "bert")
  out = testing.check(obj, batch)
  doc = np.asarray(batch["doc_ids"])
  every = ((doc[:, 1:] == doc[:, :-1]) & (doc[:, :-1] > 0)).sum()
  assert 0 < out["metrics"]["weight_sum"] < every  # the suffix only


@pytest.mark.slow
def test_prefix_lm_on_gpt2_attends_both_ways_within_the_prefix():
  """T5 section 3.2.1: the prefix is read bidirectionally, the suffix
  causally; documents stay apart."""
  obj = testing.build("prefix_lm", "gpt2")
  assert obj.interface == "decoder"
  batch = testing.tiny_batch()
  params = common.nn.meta.unbox(obj.init(jax.random.key(0), batch))
  inputs = obj.corrupt(batch, jax.random.key(3))
  run = jax.jit(lambda i: obj.run(params, i, None, True)["hidden"])
  base = np.asarray(run(inputs))
  pre = np.asarray(inputs["prefix"])
  doc = np.asarray(batch["doc_ids"])
  r, d = next((r, d) for r in range(len(doc)) for d in np.unique(doc[r])
              if d and (pre[r] & (doc[r] == d)).sum() >= 3)
  first, last = np.flatnonzero(pre[r] & (doc[r] == d))[[0, -1]]
  changed = dict(inputs, tokens=inputs["tokens"].at[r, last].set(11))
  out = np.asarray(run(changed))
  # The prefix's first piece sees the prefix's last one ...
  assert np.abs(out[r, first] - base[r, first]).max() > 1e-4
  # ... and no suffix piece changes the prefix.
  suffix = np.flatnonzero(~pre[r] & (doc[r] == d))
  if len(suffix):
    edited = dict(inputs, tokens=inputs["tokens"].at[r, suffix[-1]].set(11))
    np.testing.assert_allclose(np.asarray(run(edited))[r][pre[r]],
                               base[r][pre[r]], atol=1e-5)
  testing.check(obj, batch)


def test_bilm_elmo():
  batch = testing.tiny_batch()
  obj = testing.build("bilm", "elmo")
  out = testing.check(obj, batch)
  m = out["metrics"]
  assert m["forward_weight_sum"] == m["backward_weight_sum"] > 0
