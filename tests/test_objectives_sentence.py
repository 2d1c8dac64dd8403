"""nsp, sop and structbert: pairs cut on sentence boundaries, labels, loss."""

import math

import jax
import numpy as np
import pytest

import data
import objectives
from objectives import sentence
from tests import objective_checks as testing

SP = testing.SPECIALS


@pytest.fixture(scope="module")
def batch():
  return testing.tiny_batch(seq_len=128, batch_size=32)


def _body(row, doc, d):
  tok = np.asarray(row)[np.asarray(doc) == d]
  return list(tok[tok != SP.eos])


def _contains(doc, seg):
  return any(doc[i:i + len(seg)] == seg for i in range(len(doc)))


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
    own = [_body(batch["tokens"][r], batch["doc_ids"][r], d)
           for d in _doc_ids(batch, r)]
    keys = np.asarray(pair["doc_keys"][r])
    key_a, key_b = set(keys[1:a + 1]), set(keys[a + 2:a + 2 + b])
    if labels[r] == 0:
      assert any(seg_a + seg_b == d for d in own) and key_a == key_b
    elif labels[r] == 1:
      assert any(seg_b + seg_a == d for d in own) and key_a == key_b
    else:
      # A is a document's head; B another document's tail.
      assert any(d[:len(seg_a)] == seg_a for d in own)
      assert not key_a & key_b
      other = [_body(batch["tokens"][i], batch["doc_ids"][i], d)
               for i in range(tok.shape[0]) for d in _doc_ids(batch, i)
               if i != r]
      assert any(_contains(d, seg_b) for d in other)


def test_nsp_negatives_never_share_a_document_on_real_rows():
  """Packing cuts a document into consecutive rows of one stream: batches
  of such rows (a loader's rows of 16 steps stacked) put the same text in
  neighbouring rows, never a negative."""
  ld = data.pretrain_loader({"source": "sample"}, seq_len=64, batch_size=1,
                            seed=3)
  specials = objectives.Specials(**ld.tokenizer.specials())
  pairs = jax.jit(sentence.sentence_pairs, static_argnums=(2, 3, 4))
  negatives = 0
  for step in range(4):
    rows = [next(ld) for _ in range(16)]
    batch = {k: np.concatenate([r[k] for r in rows]) for k in rows[0]}
    shares = (batch["doc_keys"][1:, 0] == batch["doc_keys"][:-1, -1]).sum()
    assert step or shares > 0  # the risk is real: rows continue documents
    pair = pairs(jax.random.key(step), batch, specials, ("next", "random"),
                 64)
    keys, label = np.asarray(pair["doc_keys"]), np.asarray(pair["label"])
    types, real = np.asarray(pair["token_types"]), keys > 0
    for r in np.flatnonzero(label == 1):
      a = set(keys[r][real[r] & (types[r] == 0)])
      assert not a & set(keys[r][real[r] & (types[r] == 1)])
      negatives += 1
  assert negatives > 0


def test_a_batch_of_one_document_has_no_negatives(batch):
  one = dict(batch, doc_keys=np.where(np.asarray(batch["doc_ids"]) > 0, 5, 0))
  pair = sentence.sentence_pairs(jax.random.key(1), one, SP,
                                 ("next", "swap", "random"), 128)
  assert set(np.asarray(pair["label"])) == {0, 1}


def test_nsp_labels_balanced(batch):
  pair = sentence.sentence_pairs(jax.random.key(1), batch, SP,
                                 ("next", "random"), 128)
  frac = float(np.asarray(pair["label"]).mean())
  assert 0.25 < frac < 0.75


@pytest.mark.parametrize("name,mlm_weight", [("nsp", 1.0), ("sop", 0.0),
                                             ("structbert", 1.0)])
@pytest.mark.slow
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


@pytest.mark.slow
def test_pair_mlm_gathered_head_loss_equals_full_logits_loss():
  obj = testing.build("nsp", "bert", model_args={"dropout_rate": 0.1})
  testing.assert_gathered_loss_matches(obj, testing.tiny_batch(),
                                       part="mlm_")
