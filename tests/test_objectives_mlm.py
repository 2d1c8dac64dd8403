"""mlm, wwm, phrase_mlm and span_mlm (+ SBO): corruption, loss, training."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from objectives import common
from objectives import mlm
from objectives import noise
from objectives import span_mlm
from tests import objective_checks as testing

SP = testing.SPECIALS


@pytest.mark.slow
def test_mlm_corruption_and_training():
  batch = testing.tiny_batch()
  obj = testing.build("mlm", "bert")
  inputs = obj.corrupt(batch, jax.random.key(5))
  ok = np.asarray(noise.eligible(batch["tokens"], SP))
  mask = np.asarray(inputs["mask"])
  np.testing.assert_array_equal(
      mask.sum(-1), np.round(np.float32(ok.sum(-1)) * np.float32(0.15)))
  changed = np.asarray(inputs["inputs"] != batch["tokens"])
  assert not changed[~mask].any()
  out = testing.check(obj, batch)
  assert out["metrics"]["weight_sum"] == mask.sum()


@pytest.mark.parametrize("name,key", [("wwm", "word_ids"),
                                      ("phrase_mlm", "phrase_ids")])
def test_unit_masking_keeps_units_whole(name, key):
  batch = testing.tiny_batch(seq_len=128, batch_size=16)
  obj = testing.build(name, "bert")
  mask = np.asarray(jax.jit(obj.corrupt)(batch, jax.random.key(2))["mask"])
  ids = np.asarray(batch[key])
  ok = np.asarray(noise.eligible(batch["tokens"], SP))
  same = ok[:, 1:] & ok[:, :-1] & (ids[:, 1:] == ids[:, :-1]) & (ids[:, 1:] > 0)
  assert (mask[:, 1:][same] == mask[:, :-1][same]).all()
  assert mask[:, 1:][same].any()  # some multi-piece unit was masked
  rate = mask.sum() / ok.sum()
  assert 0.11 < rate <= 0.15, rate


def test_unknown_unit_is_rejected():
  with pytest.raises(ValueError, match="masking unit"):
    testing.build("mlm", "bert", unit="sentence")
  with pytest.raises(ValueError, match="no options"):
    testing.build("mlm", "bert", rat=0.2)


def test_span_boundaries_hand_example():
  mask = jnp.array([[0, 1, 1, 1, 0, 0, 1, 0]], bool)
  left, right, rel = span_mlm.span_boundaries(mask)
  m = np.asarray(mask[0])
  np.testing.assert_array_equal(np.asarray(left[0])[m], [0, 0, 0, 5])
  np.testing.assert_array_equal(np.asarray(right[0])[m], [4, 4, 4, 7])
  np.testing.assert_array_equal(np.asarray(rel[0])[m], [1, 2, 3, 1])


def test_span_corruption_decides_per_span():
  batch = testing.tiny_batch(seq_len=128, batch_size=16)
  obj = testing.build("span_mlm", "bert")
  inputs = jax.jit(obj.corrupt)(batch, jax.random.key(4))
  mask, inp = np.asarray(inputs["mask"]), np.asarray(inputs["inputs"])
  tok = np.asarray(batch["tokens"])
  kinds = []
  for r in range(mask.shape[0]):
    t = 0
    while t < mask.shape[1]:
      if not mask[r, t]:
        t += 1
        continue
      e = t
      while e < mask.shape[1] and mask[r, e]:
        e += 1
      is_mask = inp[r, t:e] == SP.mask
      assert is_mask.all() or not is_mask.any()
      kept = inp[r, t:e] == tok[r, t:e]
      kinds.append("mask" if is_mask.all() else "kept" if kept.all()
                   else "random")
      t = e
  assert kinds.count("mask") > kinds.count("kept") > 0
  assert "random" in kinds


@pytest.mark.slow
def test_span_mlm_with_sbo_trains():
  batch = testing.tiny_batch()
  obj = testing.build("span_mlm", "bert")
  out = testing.check(obj, batch, uniform=False)
  m = out["metrics"]
  testing.assert_near_uniform(m["mlm_loss_sum"] / m["mlm_weight_sum"])
  testing.assert_near_uniform(m["sbo_loss_sum"] / m["sbo_weight_sum"])
  assert m["sbo_weight_sum"] == m["mlm_weight_sum"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("tied", [True, False])
def test_sbo_output_layer_is_tied_to_the_token_table_by_default(tied):
  batch = testing.tiny_batch()
  options = dict(mask_rate=1.0, random_rate=0.0)  # no random pieces fed
  obj = testing.build("span_mlm", "bert", **options,
                      **({} if tied else {"sbo_tied": False}))
  params = nn.meta.unbox(obj.init(jax.random.key(0), batch))
  assert ("logits" in params["sbo"]) != tied
  only_sbo = lambda p: obj.loss(p, batch, jax.random.key(1),
                                deterministic=True)[1]["sbo_loss_sum"]
  grad = jax.grad(only_sbo)(params)["model"]["embeddings"]["token"]
  unseen = np.setdiff1d(np.arange(SP.vocab_size),
                        np.asarray(batch["tokens"]))
  unseen = unseen[unseen != SP.mask]
  # Pieces never fed to the encoder reach the SBO loss only as outputs.
  reached = np.abs(np.asarray(grad["embedding"])[unseen]).max() > 0
  assert reached == tied


@pytest.mark.parametrize("name,family", [("mlm", "bert"),
                                         ("phrase_mlm", "albert"),
                                         ("wwm", "distilbert")])
@pytest.mark.slow
def test_gathered_head_loss_equals_full_logits_loss(name, family):
  obj = testing.build(name, family, model_args={"dropout_rate": 0.1})
  testing.assert_gathered_loss_matches(obj, testing.tiny_batch())


def _dense_rows(length, rows=4, word=3):
  """Rows of ordinary pieces only, so every position is eligible."""
  t = np.arange(rows * length).reshape(rows, length) % 400 + SP.first_regular
  words = np.arange(length)[None, :] // word + 1
  return {"tokens": jnp.asarray(t, jnp.int32),
          "word_ids": jnp.asarray(np.broadcast_to(words, t.shape), jnp.int32),
          "phrase_ids": jnp.zeros(t.shape, jnp.int32)}


@pytest.mark.slow
@pytest.mark.parametrize("unit", ["token", "word"])
def test_prediction_budget_bounds_every_mask(unit):
  for length in (1, 128, 203):
    batch = _dense_rows(length)
    for rate in (0.01, 0.15, 0.5, 0.99):
      k = common.prediction_budget(rate, length)
      _, mask = mlm.mask_tokens(jax.random.key(length), batch, SP, rate=rate,
                                unit=unit)
      most = int(np.asarray(mask).sum(-1).max())
      assert most <= k <= length, (length, rate, most, k)
      if unit == "token":  # iid masks fill their budget: the bound is tight
        assert most >= k - 2, (length, rate, most, k)


def test_prediction_positions_put_noised_first():
  mask = jnp.array([[0, 1, 0, 1, 1, 0], [0, 0, 0, 0, 0, 0]], bool)
  at, ok = common.prediction_positions(mask, 4)
  np.testing.assert_array_equal(np.asarray(at), [[1, 3, 4, 0], [0, 1, 2, 3]])
  np.testing.assert_array_equal(np.asarray(ok), [[1, 1, 1, 0], [0, 0, 0, 0]])
