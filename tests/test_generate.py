"""Generation: the jitted loops against plain argmax loops, beams, layout."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from zoo import generate
from zoo import models

pytestmark = pytest.mark.slow  # minutes of training runs: not the quick lane

V = 64
G = 6


@pytest.fixture(scope="module")
def nets():
  """family -> (model, config, params) of random tiny models, built once."""
  out = {}
  for family in ("t5", "bart", "gpt2"):
    config = models.make_config(family, "tiny", vocab_size=V,
                                dropout_rate=0.0)
    model = models.get(family).Model(config)
    x = jnp.zeros((1, 8), jnp.int32) + 7
    args = (x,) if family == "gpt2" else (x, x[:, :G])
    params = jax.jit(lambda r, a=args, m=model: m.init(r, *a))(
        jax.random.key(3))["params"]
    out[family] = (model, config, params)
  return out


def _by_hand(forward, prefix, steps, length):
  """Greedy ids by re-running `forward` on the growing prefix, right-padded
  to a fixed `length` (causal attention ignores the padding after it)."""
  seq = list(prefix)
  for _ in range(steps):
    row = np.zeros((1, length), np.int32)
    row[0, :len(seq)] = seq
    seq.append(int(jnp.argmax(forward(row)[0, len(seq) - 1])))
  return seq[len(prefix):]


@pytest.mark.slow
@pytest.mark.parametrize("family", ["t5", "bart"])
def test_greedy_encdec_equals_argmax_loop(nets, family):
  model, config, params = nets[family]
  enc = np.array([[9, 10, 11, 12, 13, 1, 0, 0], [20, 21, 1, 0, 0, 0, 0, 0]],
                 np.int32)
  start = getattr(config, "decoder_start_id", config.pad_id)
  # eos=-1 never matches, so every row runs the full G steps.
  got = generate.greedy_encdec(params, enc, family=family, config=config,
                               max_len=G, start_id=start, eos_id=-1)
  assert got.shape == (2, G)
  full = jax.jit(lambda e, d: model.apply({"params": params}, e, d)["logits"])
  for i, row in enumerate(enc):
    want = _by_hand(lambda d, r=row: full(r[None], d), [start], G, G)
    assert got[i].tolist() == want


def test_greedy_decoder_equals_argmax_loop_with_left_padding(nets):
  model, config, params = nets["gpt2"]
  prompts = [[8, 9, 10, 11, 5], [30, 5]]
  left = np.zeros((2, 5), np.int32)
  for i, p in enumerate(prompts):
    left[i, 5 - len(p):] = p
  got = generate.greedy_decoder(params, left, family="gpt2", config=config,
                                max_len=G, eos_id=-1)
  full = jax.jit(lambda t: model.apply({"params": params}, t)["logits"])
  for i, p in enumerate(prompts):
    assert got[i].tolist() == _by_hand(full, p, G, 5 + G)


def test_greedy_stops_rows_at_eos_and_pads_after(nets):
  _, config, params = nets["t5"]
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


def _sequence_logprob(full, enc, start, ids):
  logits = full(enc, np.asarray([[start] + list(ids[:-1])], np.int32))[0]
  logp = np.asarray(jax.nn.log_softmax(logits))
  return float(sum(logp[t, i] for t, i in enumerate(ids)))


def test_beam_search_scores_at_least_greedy_and_one_beam_is_greedy(nets):
  model, config, params = nets["t5"]
  enc = np.array([[9, 10, 11, 12, 1, 0, 0, 0], [40, 41, 42, 1, 0, 0, 0, 0]],
                 np.int32)
  kw = dict(family="t5", config=config, max_len=G, start_id=0, eos_id=-1)
  greedy = generate.greedy_encdec(params, enc, **kw)
  one = generate.beam_encdec(params, enc, beams=1, **kw)
  assert one.tolist() == greedy.tolist()
  beam = generate.beam_encdec(params, enc, beams=4, **kw)
  full = jax.jit(lambda e, d: model.apply({"params": params}, e, d)["logits"])
  for i in range(2):
    row = enc[i:i + 1]
    g = _sequence_logprob(full, row, 0, greedy[i].tolist())
    b = _sequence_logprob(full, row, 0, beam[i].tolist())
    assert b >= g - 1e-4


def test_prompt_layout_starts_positions_at_first_real_id():
  prompt = jnp.array([[0, 0, 7, 8], [5, 6, 7, 8]], jnp.int32)
  seg, pos = generate.prompt_layout(prompt, 0, 6)
  assert seg.tolist() == [[0, 0, 1, 1, 1, 1], [1] * 6]
  assert pos.tolist() == [[0, 0, 0, 1, 2, 3], [0, 1, 2, 3, 4, 5]]


def test_filter_logits_keeps_the_top_k_then_the_nucleus():
  logits = jnp.log(jnp.array([[0.5, 0.1, 0.3, 0.1]]))
  kept = lambda **kw: np.isfinite(np.asarray(
      generate.filter_logits(logits, **kw)))[0].tolist()
  assert kept() == [True] * 4
  assert kept(top_k=2) == [True, False, True, False]
  assert kept(top_p=0.5) == [True, False, False, False]  # 0.5 reaches it
  assert kept(top_p=0.7) == [True, False, True, False]
  assert kept(top_k=1, top_p=0.99) == [True, False, False, False]


def test_sampling_at_top_k_1_is_greedy_and_a_key_repeats(nets):
  _, config, params = nets["gpt2"]
  left = np.array([[0, 8, 9, 5], [30, 31, 32, 5]], np.int32)
  kw = dict(family="gpt2", config=config, max_len=G, eos_id=-1)
  greedy = generate.greedy_decoder(params, left, **kw)
  one = generate.sample_decoder(params, left, jax.random.key(0), top_k=1,
                                **kw)
  assert one.tolist() == greedy.tolist()
  a, b, c = (generate.sample_decoder(params, left, jax.random.key(k),
                                     temperature=2.0, **kw) for k in (1, 1, 2))
  assert a.tolist() == b.tolist() and a.tolist() != c.tolist()
