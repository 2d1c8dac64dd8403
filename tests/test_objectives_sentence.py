"""nsp, sop and structbert: pairs cut on sentence boundaries, labels, loss."""

import math

import jax
import numpy as np
import pytest

from objectives import sentence
from objectives import testing

SP = testing.SPECIALS


@pytest.fixture(scope="module")
def batch():
  return testing.tiny_batch(seq_len=128, batch_size=32)


def _body(row, doc, d):
  tok = np.asarray(row)[np.asarray(doc) == d]
  return list(tok[tok != SP.eos])


def _doc_ids(batch, r):
  doc = np.asarray(batch["doc_ids"][r])
  return [d for d in np.unique(doc) if d > 0]


def test_structbert_pairs_match_their_labels(batch):
  kinds = ("next", "swap", "random")
  pair = jax.jit(sentence.sentence_pairs, static_argnums=(2, 3, 4))(
      jax.random.key(0), batch, SP, kinds, 128)
  tok = np.asarray(pair["tokens"])
  labels = np.asarray(pair["label"])
  assert set(labels) == {0, 1, 2}
  for r in range(tok.shape[0]):
    a, b = int(pair["a_len"][r]), int(pair["b_len"][r])
    seg_a, seg_b = list(tok[r, 1:a + 1]), list(tok[r, a + 2:a + 2 + b])
    assert tok[r, 0] == SP.cls and tok[r, a + 1] == tok[r, a + 2 + b] == SP.sep
    assert (np.asarray(pair["segment_ids"][r]) > 0).sum() == a + b + 3
    docs = [_body(batch["tokens"][i], batch["doc_ids"][i], d)
            for i in (r, (r - 1) % tok.shape[0])
            for d in _doc_ids(batch, i)]
    if labels[r] == 0:
      assert any(seg_a + seg_b == d for d in docs)
    elif labels[r] == 1:
      assert any(seg_b + seg_a == d for d in docs)
    else:
      # A is a document's head; B another row's tail.
      own = docs[:len(_doc_ids(batch, r))]
      other = docs[len(own):]
      assert any(d[:len(seg_a)] == seg_a for d in own)
      assert any(d[len(d) - len(seg_b):] == seg_b for d in other)


def test_nsp_labels_balanced(batch):
  pair = sentence.sentence_pairs(jax.random.key(1), batch, SP,
                                 ("next", "random"), 128)
  frac = float(np.asarray(pair["label"]).mean())
  assert 0.25 < frac < 0.75


@pytest.mark.parametrize("name,mlm_weight", [("nsp", 1.0), ("sop", 0.0),
                                             ("structbert", 1.0)])
def test_trains(name, mlm_weight):
  batch = testing.tiny_batch()
  obj = testing.build(name, "bert", mlm_weight=mlm_weight)
  out = testing.check(obj, batch, uniform=False, steps=30)
  m = out["metrics"]
  classes = len(obj.kinds)
  assert abs(m["sentence_loss_sum"] / m["sentence_weight_sum"]
             - math.log(classes)) < 0.3
  assert m["sentence_weight_sum"] == batch["tokens"].shape[0]
  if mlm_weight:
    testing.assert_near_uniform(m["mlm_loss_sum"] / m["mlm_weight_sum"])
  else:
    assert "mlm_loss_sum" not in m


def test_pair_mlm_gathered_head_loss_equals_full_logits_loss():
  obj = testing.build("nsp", "bert", model_args={"dropout_rate": 0.1})
  testing.assert_gathered_loss_matches(obj, testing.tiny_batch(),
                                       part="mlm_")
