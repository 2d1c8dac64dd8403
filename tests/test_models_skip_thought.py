"""Skip-Thought: the GRU by hand, which vector conditions which sentence,
decoders that never see the sentence they predict, and the scheme's loss."""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from objectives import common
from objectives import skip_thought as scheme
from tests import objective_checks as testing
from zoo import loading
from zoo import models
from zoo.finetune import arrays as finetune_arrays
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


def _inputs(tokens):
  """The model's keywords on a row of SENT's sentences, as the scheme
  feeds it (decoder inputs shifted right within each sentence)."""
  tokens, sent = jnp.asarray(tokens), jnp.asarray(SENT)
  return dict(segment_ids=sent,
              decoder_inputs=common.shift_right(tokens, sent, 0))


@pytest.fixture(scope="module")
def model():
  config = models.make_config("skip_thought", "tiny")
  mod = skip_thought.Model(config)
  tokens = jnp.full(SENT.shape, 7, jnp.int32)
  params = mod.init(jax.random.key(1), tokens, **_inputs(tokens))["params"]
  return mod, params


def _logits(model, tokens):
  mod, params = model
  return mod.apply({"params": params}, jnp.asarray(tokens), **_inputs(tokens))


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


TWO = "The cat sat on the mat. Then the dog barked at it."


def test_a_loaded_encoder_reads_each_sentence_of_a_text_afresh(tok):
  config = models.make_config("skip_thought", "tiny",
                              vocab_size=tok.vocab_size)
  params = models.init_params("skip_thought", config, jax.random.key(1),
                              heads=False)
  loaded = loading.Loaded("skip_thought", config, params, tok, None, "")
  both = loaded.embed([TWO])
  alone = loaded.embed(["Then the dog barked at it."])
  first = len(tok.encode("The cat sat on the mat."))
  ids = loaded.sentence_ids([TWO], both["tokens"].shape[1])[0]
  np.testing.assert_array_equal(ids, [1] * first + [2] * (len(ids) - first))
  # The second sentence's states equal the sentence's own, alone: the
  # encoder restarts there (its eos closes that sentence in both rows).
  np.testing.assert_allclose(both["hidden"][0, first:],
                             alone["hidden"][0], atol=1e-6)
  # Read whole (sentence_reading=False), the state runs on across them.
  whole = dataclasses.replace(loaded, config=dataclasses.replace(
      config, sentence_reading=False))
  assert whole.sentence_ids([TWO], 20) is None
  assert np.abs(whole.embed([TWO])["hidden"][0, first:len(ids)]
                - both["hidden"][0, first:len(ids)]).max() > 1e-4


def test_fine_tuning_rows_number_the_sentences(tok):
  ex = {"text": TWO, "text_b": "Yes. No.", "label": 0}
  out = finetune_arrays.encoder_arrays("pair", [ex], tok, 40, sentences=True)
  a, b = tok.encode("The cat sat on the mat."), tok.encode(
      "Then the dog barked at it.")
  c, d = tok.encode("Yes."), tok.encode("No.")
  row = out["sentence_ids"][0]
  want = ([1] * (1 + len(a)) + [2] * (len(b) + 1) + [3] * len(c)
          + [4] * (len(d) + 1))
  np.testing.assert_array_equal(row[:len(want)], want)
  assert not row[len(want):].any()
  plain = finetune_arrays.encoder_arrays("pair", [ex], tok, 40)
  assert "sentence_ids" not in plain
  np.testing.assert_array_equal(out["token_types"], plain["token_types"])
