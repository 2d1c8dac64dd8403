"""AWD-LSTM: its dropouts, causality, document resets, AR and TAR."""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

import objectives
from objectives import lm
from tests import objective_checks as testing
from zoo import models
from zoo.models import awd_lstm
from zoo.models import lstm

NO_DROPOUT = dict(dropout_rate=0.0, hidden_dropout=0.0, input_dropout=0.0,
                  embed_dropout=0.0, weight_drop=0.0)


def _model(**overrides):
  config = models.make_config("awd_lstm", "tiny", **overrides)
  tokens = jax.random.randint(jax.random.key(0), (2, 9), 7, 500)
  params = models.init_params("awd_lstm", config, jax.random.key(1))
  return awd_lstm.Model(config), tokens, params


def _run(model, params, tokens, seed=None, **kw):
  rngs = {} if seed is None else {"dropout": jax.random.key(seed)}
  return model.apply({"params": params}, tokens, deterministic=seed is None,
                     rngs=rngs, **kw)


def test_weight_drop_acts_on_the_recurrent_matrix_only():
  layer = lstm.LSTM(16, weight_drop=0.9)
  x = jax.random.normal(jax.random.key(0), (2, 5, 8))
  seg = jnp.ones((2, 5), jnp.int32)
  params = layer.init(jax.random.key(1), x, seg)
  plain = layer.apply(params, x, seg)
  dropped = layer.apply(params, x, seg, deterministic=False,
                        rngs={"dropout": jax.random.key(2)})
  # Step 0 reads no state: input kernel and bias are untouched.
  np.testing.assert_array_equal(dropped[:, 0], plain[:, 0])
  assert not np.allclose(dropped[:, 1:], plain[:, 1:])
  # Without a recurrent matrix there is nothing to drop.
  zero = jax.tree_util.tree_map_with_path(
      lambda p, v: jnp.zeros_like(v) if "state_kernel" in str(p) else v,
      params)
  np.testing.assert_array_equal(
      layer.apply(zero, x, seg),
      layer.apply(zero, x, seg, deterministic=False,
                  rngs={"dropout": jax.random.key(2)}))


def test_locked_dropout_masks_the_same_features_at_every_step():
  model, tokens, params = _model(**dict(NO_DROPOUT, dropout_rate=0.5))
  out = _run(model, params, tokens, seed=3)
  zero = np.asarray(out["dropped"] == 0)
  assert zero.any() and not zero.all()
  assert (zero == zero[:, :1]).all()  # one mask per row, every position
  np.testing.assert_allclose(np.where(zero, 0, out["hidden"] * 2),
                             out["dropped"], rtol=1e-6)


def test_embedding_dropout_drops_whole_pieces():
  model, _, params = _model(**dict(NO_DROPOUT, embed_dropout=0.5))
  tokens = jnp.array([[9, 10, 9, 11, 10, 9]] * 2)
  x = np.asarray(_run(model, params, tokens, seed=4)["layers"][0])
  gone = (x == 0).all(-1)
  assert gone.any() and not gone.all()
  for piece in (9, 10, 11):  # a piece is dropped everywhere or nowhere
    at = np.asarray(tokens == piece)
    assert len(set(gone[at].tolist())) == 1


def test_outputs_are_causal_and_restart_at_each_document():
  model, tokens, params = _model(**NO_DROPOUT)
  base = _run(model, params, tokens)
  changed = _run(model, params, tokens.at[:, 6].set(42))
  np.testing.assert_array_equal(base["logits"][:, :6],
                                changed["logits"][:, :6])
  seg = jnp.array([[1] * 4 + [2] * 5] * 2)
  packed = _run(model, params, tokens, segment_ids=seg)["hidden"]
  alone = _run(model, params, tokens[:, 4:])["hidden"]
  np.testing.assert_allclose(packed[:, 4:], alone, rtol=1e-5, atol=1e-6)
  assert len(base["layers"]) == 2 and "logits" not in _run(
      model, params, tokens, return_logits=False)


def test_ar_and_tar_by_hand():
  obj = objectives.build("awd_lm", "awd_lstm", "tiny", testing.SPECIALS,
                         model_args=dict(NO_DROPOUT, dropout_rate=0.3),
                         ar=2.0, tar=1.0)
  batch = testing.tiny_batch(seq_len=12, batch_size=2)
  params = nn.meta.unbox(obj.init(jax.random.key(0), batch))
  rng = jax.random.key(5)
  loss, m = obj.loss(params, batch, rng)
  _, k_drop, _ = jax.random.split(rng, 3)
  out = obj.run(params, obj.corrupt(batch, None), k_drop, False)
  doc = np.asarray(batch["doc_ids"])
  drop, h = np.asarray(out["dropped"]), np.asarray(out["hidden"])
  ar = (drop[doc > 0] ** 2).mean()
  pair = (doc[:, 1:] == doc[:, :-1]) & (doc[:, 1:] > 0)
  tar = ((h[:, 1:] - h[:, :-1])[pair] ** 2).mean()
  lm_mean = float(m["lm_loss_sum"] / m["lm_weight_sum"])
  np.testing.assert_allclose(float(m["ar_loss_sum"] / m["ar_weight_sum"]),
                             ar, rtol=1e-5)
  np.testing.assert_allclose(float(m["tar_loss_sum"] / m["tar_weight_sum"]),
                             tar, rtol=1e-5)
  np.testing.assert_allclose(float(loss), lm_mean + 2 * ar + tar, rtol=1e-5)


def test_loss_falls_and_other_families_are_refused():
  obj = testing.build("awd_lm", "awd_lstm")
  testing.check(obj, testing.tiny_batch(), steps=60, lr=3e-2, uniform=False)
  try:
    objectives.build("awd_lm", "gpt2", "tiny", testing.SPECIALS)
  except ValueError as e:
    assert "AWD-LSTM" in str(e)
  else:
    raise AssertionError("awd_lm bound to gpt2")
  assert dataclasses.fields(awd_lstm.Config)  # the face every family has
  assert lm.activation_sums(jnp.ones((1, 2, 3)), jnp.array([[True, False]])
                            ) == {"loss_sum": 3.0, "weight_sum": 3.0}
