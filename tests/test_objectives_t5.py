"""The T5 family (Tables 4-7 of the T5 paper): corruption and training."""

import jax
import numpy as np
import pytest

import objectives
from objectives import encdec
from objectives import noise
from objectives import t5
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


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_trains(name):
  batch = testing.tiny_batch()
  testing.check(testing.build(name, "t5"), batch, steps=25)


@pytest.mark.slow
def test_prefix_lm_splits_each_document():
  batch = testing.tiny_batch()
  obj = testing.build("t5_prefix_lm", "t5")
  inputs = obj.corrupt(batch, jax.random.key(3))
  enc, dec = inputs["enc"], inputs["dec"]
  # Prefix and suffix re-assemble each document.
  for r in range(batch["tokens"].shape[0]):
    tok = np.asarray(batch["tokens"][r])
    doc = np.asarray(batch["doc_ids"][r])
    for d in np.unique(doc[doc > 0]):
      e = np.asarray(enc["tokens"][r])[np.asarray(enc["segment_ids"][r]) == d]
      t = np.asarray(dec["tokens"][r])[np.asarray(dec["segment_ids"][r]) == d]
      body = tok[(doc == d) & (tok != 1)]
      np.testing.assert_array_equal(np.concatenate([e[e != 1], t[t != 1]]),
                                    body)
  testing.check(obj, batch)


@pytest.mark.parametrize("name", NAMES + ("mass",))
def test_each_variant_is_one_noise_inputs_targets_line(name):
  cls = type(testing.build(name, "bart" if name == "mass" else "t5"))
  assert issubclass(cls, encdec.Denoiser)
  assert "corrupt" not in vars(cls)  # the three functions, nothing else
  for part in ("noise", "inputs", "targets"):
    fn = getattr(cls, part)
    assert fn.__module__ in ("objectives.t5", "objectives.seq2seq"), fn


@pytest.fixture
def composed():
  """A scheme made of existing parts in one line, unregistered after."""
  cls = encdec.denoiser("test_span_drop", t5.span_noise, t5.dropped_inputs,
                        t5.noise_targets, density=0.15, mean_length=3.0)
  yield cls
  del objectives._REGISTRY[cls.name]  # pylint: disable=protected-access


@pytest.mark.slow
def test_a_new_combination_is_one_line(composed, batch):
  obj = testing.build(composed.name, "t5")
  inputs = jax.jit(obj.corrupt)(batch, jax.random.key(2))
  mask = np.asarray(inputs["mask"])
  enc_n = np.asarray(inputs["enc"]["segment_ids"] > 0).sum(-1)
  valid = np.asarray(batch["doc_ids"] > 0).sum(-1)
  np.testing.assert_array_equal(enc_n, valid - mask.sum(-1))
  runs = np.diff(np.concatenate([[0], mask[0].astype(int), [0]]))
  assert (runs == 1).sum() < mask[0].sum()  # spans, not single pieces
  testing.check(obj, testing.tiny_batch(), steps=25)
