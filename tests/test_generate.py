"""Generation: the jitted loops against plain argmax loops, beams, layout."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from zoo import generate
from zoo import models

V = 64
G = 6


def _params(family, config, enc_len=8, dec_len=G):
  model = models.get(family).Model(config)
  x = jnp.zeros((1, enc_len), jnp.int32) + 7
  args = (x, jnp.zeros((1, dec_len), jnp.int32)) if (
      models.get(family).INTERFACE == "encdec") else (x,)
  return model, jax.jit(model.init)(jax.random.key(3), *args)["params"]


def _encdec_by_hand(model, params, enc_row, start, steps):
  """Greedy ids by re-running the full model on the growing prefix."""
  enc = jnp.asarray(enc_row)[None]
  dec = [start]
  for _ in range(steps):
    logits = model.apply({"params": params}, enc, jnp.asarray(dec)[None])
    dec.append(int(jnp.argmax(logits["logits"][0, -1])))
  return dec[1:]


@pytest.mark.parametrize("family", ["t5", "bart"])
def test_greedy_encdec_equals_argmax_loop(family):
  config = models.make_config(family, "tiny", vocab_size=V, dropout_rate=0.0)
  model, params = _params(family, config)
  enc = np.array([[9, 10, 11, 12, 13, 1, 0, 0], [20, 21, 1, 0, 0, 0, 0, 0]],
                 np.int32)
  start = getattr(config, "decoder_start_id", config.pad_id)
  # eos=-1 never matches, so every row runs the full G steps.
  got = generate.greedy_encdec(params, enc, family=family, config=config,
                               max_len=G, start_id=start, eos_id=-1)
  assert got.shape == (2, G)
  for i, row in enumerate(enc):
    real = row[:int((row != 0).sum())]
    want = _encdec_by_hand(model, params, real, start, G)
    assert got[i].tolist() == want


def test_greedy_decoder_equals_argmax_loop_with_left_padding():
  config = models.make_config("gpt2", "tiny", vocab_size=V, dropout_rate=0.0)
  model, params = _params("gpt2", config)
  prompts = [[8, 9, 10, 11, 5], [30, 5]]
  left = np.zeros((2, 5), np.int32)
  for i, p in enumerate(prompts):
    left[i, 5 - len(p):] = p
  got = generate.greedy_decoder(params, left, family="gpt2", config=config,
                                max_len=G, eos_id=-1)
  for i, p in enumerate(prompts):
    seq = list(p)
    for _ in range(G):
      logits = model.apply({"params": params}, jnp.asarray(seq)[None])
      seq.append(int(jnp.argmax(logits["logits"][0, -1])))
    assert got[i].tolist() == seq[len(p):]


def test_greedy_stops_rows_at_eos_and_pads_after():
  config = models.make_config("t5", "tiny", vocab_size=V, dropout_rate=0.0)
  _, params = _params("t5", config)
  enc = np.array([[9, 10, 11, 1, 0, 0, 0, 0]], np.int32)
  free = generate.greedy_encdec(params, enc, family="t5", config=config,
                                max_len=G, start_id=0, eos_id=-1)
  eos = int(free[0, 2])  # call the third generated id "eos"
  got = generate.greedy_encdec(params, enc, family="t5", config=config,
                               max_len=G, start_id=0, eos_id=eos)
  first = free[0].tolist().index(eos)
  assert got[0, :first + 1].tolist() == free[0, :first + 1].tolist()
  assert (np.asarray(got[0, first + 1:]) == 0).all()
  assert generate.trim(got, eos)[0] == free[0, :first].tolist()


def _sequence_logprob(model, params, enc, start, ids):
  dec = jnp.asarray([[start] + list(ids[:-1])])
  logits = model.apply({"params": params}, enc, dec)["logits"][0]
  logp = jax.nn.log_softmax(logits)
  return float(sum(logp[t, i] for t, i in enumerate(ids)))


def test_beam_search_scores_at_least_greedy_and_one_beam_is_greedy():
  config = models.make_config("t5", "tiny", vocab_size=V, dropout_rate=0.0)
  model, params = _params("t5", config)
  enc = np.array([[9, 10, 11, 12, 1, 0, 0, 0], [40, 41, 42, 1, 0, 0, 0, 0]],
                 np.int32)
  kw = dict(family="t5", config=config, max_len=G, start_id=0, eos_id=-1)
  greedy = generate.greedy_encdec(params, enc, **kw)
  one = generate.beam_encdec(params, enc, beams=1, **kw)
  assert one.tolist() == greedy.tolist()
  beam = generate.beam_encdec(params, enc, beams=4, **kw)
  for i in range(2):
    row = jnp.asarray(enc[i:i + 1])
    g = _sequence_logprob(model, params, row, 0, greedy[i].tolist())
    b = _sequence_logprob(model, params, row, 0, beam[i].tolist())
    assert b >= g - 1e-4


def test_prompt_layout_starts_positions_at_first_real_id():
  prompt = jnp.array([[0, 0, 7, 8], [5, 6, 7, 8]], jnp.int32)
  seg, pos = generate.prompt_layout(prompt, 0, 6)
  assert seg.tolist() == [[0, 0, 1, 1, 1, 1], [1] * 6]
  assert pos.tolist() == [[0, 0, 0, 1, 2, 3], [0, 1, 2, 3, 4, 5]]
