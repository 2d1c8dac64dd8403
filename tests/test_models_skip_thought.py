"""Skip-Thought: the GRU by hand, which vector conditions which sentence,
decoders that never see the sentence they predict, and the scheme's loss."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from objectives import skip_thought as scheme
from tests import objective_checks as testing
from zoo import models
from zoo.models import lstm
from zoo.models import skip_thought

# Two documents in one row: sentences 1-3 (doc 1), 4-5 (doc 2), padding.
SENT = np.array([[1, 1, 1, 2, 2, 3, 3, 3, 4, 4, 4, 5, 5, 0, 0]], np.int32)
DOCS = np.array([[1] * 8 + [2] * 5 + [0, 0]], np.int32)


def _sigmoid(x):
  return 1.0 / (1.0 + np.exp(-x))


def test_gru_matches_the_paper_equations_and_restarts_per_segment():
  layer = lstm.GRU(6)
  x = jax.random.normal(jax.random.key(0), (2, 7, 4))
  cond = jax.random.normal(jax.random.key(1), (2, 7, 3))
  seg = jnp.asarray([[1, 1, 1, 2, 2, 2, 0], [1] * 7], jnp.int32)
  params = layer.init(jax.random.key(2), x, seg, cond)
  got = np.asarray(layer.apply(params, x, seg, cond))
  p = {k: np.asarray(v) for k, v in nn.meta.unbox(params)["params"].items()}
  for b in range(2):
    h = np.zeros(6)
    for t in range(7):
      if t == 0 or seg[b, t] != seg[b, t - 1]:
        h = np.zeros(6)
      pre = np.asarray(x[b, t]) @ p["input_kernel"] + p["bias"] + (
          np.asarray(cond[b, t]) @ p["cond_kernel"])
      rz = _sigmoid(pre[:12] + h @ p["gate_kernel"])
      r, z = rz[:6], rz[6:]
      cand = np.tanh(pre[12:] + (r * h) @ p["candidate_kernel"])
      h = (1 - z) * h + z * cand
      np.testing.assert_allclose(got[b, t], h, rtol=1e-5, atol=1e-6)


def test_each_sentence_reads_its_neighbours_last_state():
  hidden = jax.random.normal(jax.random.key(0), (1, 15, 5))
  ends = {1: 2, 2: 4, 3: 7, 4: 10, 5: 12}  # sentence -> last position
  for offset in (-1, 1):
    got, ok = skip_thought.neighbour_vectors(hidden, jnp.asarray(SENT),
                                             offset)
    for t, s in enumerate(SENT[0]):
      want = s + offset
      if s and want in ends:
        assert ok[0, t]
        np.testing.assert_array_equal(got[0, t], hidden[0, ends[want]])
      else:
        assert not ok[0, t] and not np.any(got[0, t])


def test_neighbours_count_within_the_document_only():
  nxt = scheme.neighbour_in_document(jnp.asarray(DOCS), jnp.asarray(SENT), -1)
  prev = scheme.neighbour_in_document(jnp.asarray(DOCS), jnp.asarray(SENT), 1)
  # "next" generates s from s - 1: not the first sentence of a document.
  np.testing.assert_array_equal(nxt[0], np.isin(SENT[0], [2, 3, 5]))
  # "previous" generates s from s + 1: not the last sentence of one.
  np.testing.assert_array_equal(prev[0], np.isin(SENT[0], [1, 2, 4]))


@pytest.fixture(scope="module")
def model():
  config = models.make_config("skip_thought", "tiny")
  params = models.init_params("skip_thought", config, jax.random.key(1),
                              length=15)
  return skip_thought.Model(config), params


def _logits(model, tokens):
  mod, params = model
  return mod.apply({"params": params}, jnp.asarray(tokens),
                   segment_ids=jnp.asarray(SENT))


def test_decoders_never_see_the_sentence_they_predict(model):
  tokens = np.random.default_rng(0).integers(7, 500, SENT.shape)
  tokens[SENT == 0] = 0
  base = _logits(model, tokens)
  for t in range(13):
    changed = tokens.copy()
    changed[0, t] = 3 if tokens[0, t] != 3 else 4
    out = _logits(model, changed)
    own = SENT[0] == SENT[0, t]
    for name in skip_thought.DECODERS:
      diff = np.abs(np.asarray(out[f"logits_{name}"] - base[f"logits_{name}"]
                               )).max(-1)[0]
      # The piece itself and what precedes it in its own sentence are
      # predicted without it: no vector of its sentence conditions them.
      assert np.all(diff[own & (np.arange(15) <= t)] == 0), (name, t)
      # Its own sentence's vector conditions the neighbour it generates.
      reader = (SENT[0] == SENT[0, t] - skip_thought.OFFSETS[name]) & (
          SENT[0] > 0)
      if reader.any():
        assert np.all(diff[reader] > 0), (name, t)


def test_encoder_alone_is_the_backbone(model):
  mod, params = model
  out = mod.apply({"params": params}, jnp.ones((2, 6), jnp.int32) * 9,
                  return_logits=False)
  assert set(out) == {"hidden", "layers"} and out["hidden"].shape == (2, 6, 64)
  fresh = models.init_params("skip_thought", mod.config, jax.random.key(0),
                             heads=False)
  assert set(fresh) == {"token_embedding", "encoder"}


def test_scheme_learns_a_fixed_batch_and_needs_its_family():
  obj = testing.build("skip_thought", "skip_thought")
  batch = testing.tiny_batch(seq_len=64, batch_size=4)
  out = testing.check(obj, batch, steps=40, lr=2e-2)
  assert out["metrics"]["next_weight_sum"] > 0
  assert out["metrics"]["previous_weight_sum"] > 0
  with pytest.raises(ValueError, match="needs the skip_thought family"):
    testing.build("skip_thought", "bert")


def test_every_param_maps_onto_a_mesh():
  testing.assert_params_map_onto_mesh("skip_thought", "skip_thought")
