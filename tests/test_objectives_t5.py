"""The T5 family (Tables 4-7 of the T5 paper): corruption and training."""

import jax
import numpy as np
import pytest

import objectives
from objectives import noise
from tests import objective_checks as testing

SP = testing.SPECIALS
NAMES = ("t5_span", "t5_iid", "t5_bert", "t5_mass", "t5_drop",
         "t5_deshuffle", "t5_prefix_lm")


def _corrupt(name, batch, **options):
  obj = testing.build(name, "t5", **options)
  return obj, jax.jit(obj.corrupt)(batch, jax.random.key(11))


@pytest.fixture(scope="module")
def batch():
  return testing.tiny_batch(seq_len=128, batch_size=16)


def test_family_registered():
  assert set(NAMES) <= set(objectives.names())


def test_span_targets_fit_and_invert(batch):
  obj, inputs = _corrupt("t5_span", batch)
  enc, dec = inputs["enc"], inputs["dec"]
  assert dec["tokens"].shape[1] < batch["tokens"].shape[1]
  mask = np.asarray(inputs["mask"])
  for r in range(mask.shape[0]):
    orig = testing.docs_of({"tokens": batch["tokens"],
                  "segment_ids": batch["doc_ids"]}, r)
    e, d = testing.docs_of(enc, r), testing.docs_of(dec, r)
    assert set(d) == set(orig)  # no document's target was cut off
    for k, toks in orig.items():
      spans, cur = {}, None
      for t in d[k]:
        if t > SP.last_regular:
          cur = SP.vocab_size - 1 - t
          spans[cur] = []
        elif t != SP.eos:
          spans[cur].append(t)
      rebuilt = []
      for t in e[k]:
        rebuilt += spans[SP.vocab_size - 1 - t] if t > SP.last_regular else [t]
      assert rebuilt == toks


@pytest.mark.parametrize("name", ["t5_bert", "t5_mass"])
def test_reconstruction_targets(batch, name):
  _, inputs = _corrupt(name, batch)
  mask = np.asarray(inputs["mask"])
  enc = np.asarray(inputs["enc"]["tokens"])
  tok = np.asarray(batch["tokens"])
  np.testing.assert_array_equal(np.asarray(inputs["dec"]["tokens"]), tok)
  np.testing.assert_array_equal(enc[~mask], tok[~mask])
  share = (enc[mask] == SP.mask).mean()
  ok = np.asarray(noise.eligible(batch["tokens"], SP))
  assert abs(mask.sum() / ok.sum() - 0.15) < 0.03
  if name == "t5_mass":
    assert share == 1.0
  else:
    assert 0.83 < share < 0.97, share


def test_drop_tokens_lengths(batch):
  _, inputs = _corrupt("t5_drop", batch)
  mask = np.asarray(inputs["mask"])
  valid = np.asarray(batch["doc_ids"] > 0).sum(-1)
  eos = np.asarray(batch["tokens"] == SP.eos).sum(-1)
  enc_n = np.asarray(inputs["enc"]["segment_ids"] > 0).sum(-1)
  dec_n = np.asarray(inputs["dec"]["segment_ids"] > 0).sum(-1)
  np.testing.assert_array_equal(enc_n, valid - mask.sum(-1))
  np.testing.assert_array_equal(dec_n, mask.sum(-1) + eos)


def test_deshuffle_is_a_permutation(batch):
  _, inputs = _corrupt("t5_deshuffle", batch)
  moved = 0
  for r in range(batch["tokens"].shape[0]):
    e, d = testing.docs_of(inputs["enc"], r), testing.docs_of(inputs["dec"], r)
    assert e.keys() == d.keys()
    for k in e:
      assert sorted(e[k]) == sorted(d[k])
      moved += e[k] != d[k]
  assert moved > 0


@pytest.mark.parametrize("density,mean", [(0.5, 3.0), (0.15, 10.0)])
def test_table_6_7_options(batch, density, mean):
  _, inputs = _corrupt("t5_span", batch, density=density, mean_length=mean)
  mask, ok = np.asarray(inputs["mask"]), np.asarray(
      noise.eligible(batch["tokens"], SP))
  assert abs(mask.sum() / ok.sum() - density) < 0.02


@pytest.mark.parametrize("name", NAMES)
def test_trains(name):
  batch = testing.tiny_batch()
  testing.check(testing.build(name, "t5"), batch, steps=25)
