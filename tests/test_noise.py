"""The shared noise against its definitions, over many rows with fixed keys."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from data.synthetic import SyntheticLoader
from objectives import Specials
from objectives import noise
from objectives import segments
from objectives import transforms
from tests import objective_checks as testing
from zoo import sharding
from zoo.models import masks
from zoo.plan import hlo

SP = Specials(vocab_size=512)
KEY = jax.random.key(7)


@pytest.fixture(scope="module")
def batch():
  b = next(SyntheticLoader(seq_len=128, batch_size=32, seed=3))
  return {k: jnp.asarray(v) for k, v in b.items()}


@pytest.fixture(scope="module")
def ok(batch):
  return noise.eligible(batch["tokens"], SP)


def _budget(n, rate):
  """round(n * rate) in float32, as the noise computes it on device."""
  return np.round(np.float32(n) * np.float32(rate))


def _compressed(values, ok_row):
  return np.asarray(values)[np.asarray(ok_row)]


def _runs(bits):
  """Lengths of the runs of True in a 1-d bool array."""
  out, n = [], 0
  for v in list(bits) + [False]:
    if v:
      n += 1
    elif n:
      out.append(n)
      n = 0
  return out


def test_eligible_excludes_pad_and_eos(batch, ok):
  tok = np.asarray(batch["tokens"])
  assert not np.asarray(ok)[(tok == 0) | (tok == 1)].any()
  assert np.asarray(ok)[tok >= SP.first_regular].all()


def test_iid_mask_exact_rate(batch, ok):
  mask = np.asarray(jax.jit(noise.iid_mask, static_argnums=(2,))(KEY, ok,
                                                                   0.15))
  n = np.asarray(ok).sum(-1)
  assert not (mask & ~np.asarray(ok)).any()
  np.testing.assert_array_equal(mask.sum(-1), _budget(n, 0.15))


def test_iid_mask_bernoulli_rate(ok):
  mask = np.asarray(noise.iid_mask(KEY, ok, 0.15, exact=False))
  rate = mask.sum() / np.asarray(ok).sum()
  assert abs(rate - 0.15) < 0.015, rate
  assert not (mask & ~np.asarray(ok)).any()


def test_iid_masks_differ_per_key(ok):
  a = noise.iid_mask(jax.random.key(1), ok, 0.15)
  b = noise.iid_mask(jax.random.key(2), ok, 0.15)
  assert (np.asarray(a) != np.asarray(b)).any()


def test_replace_tokens_80_10_10(batch, ok):
  tok = batch["tokens"]
  out = np.asarray(noise.replace_tokens(KEY, tok, ok, SP))
  tok, okn = np.asarray(tok), np.asarray(ok)
  np.testing.assert_array_equal(out[~okn], tok[~okn])
  masked = (out == SP.mask)[okn].mean()
  kept = (out == tok)[okn].mean()
  rand = ((out != tok) & (out != SP.mask))[okn].mean()
  assert abs(masked - 0.8) < 0.02, masked
  assert abs(kept - 0.1) < 0.015, kept  # a random draw may equal the piece
  assert abs(rand - 0.1) < 0.015, rand
  drawn = out[okn & (out != tok) & (out != SP.mask)]
  assert drawn.min() >= SP.first_regular and drawn.max() <= SP.last_regular


def _assert_units_whole(mask, unit_ids, ok):
  """Contiguous eligible pieces sharing an id are all noised or none is.

  (A synthetic word may straddle a document's EOS; its two sides are then
  two units, as the EOS between them is never noised.)
  """
  mask, unit_ids, ok = map(np.asarray, (mask, unit_ids, ok))
  for m, u, o in zip(mask, unit_ids, ok):
    same = o[1:] & o[:-1] & (u[1:] == u[:-1]) & (u[1:] > 0)
    assert (m[1:][same] == m[:-1][same]).all(), "a unit was split"


def test_whole_word_mask_never_splits_words(batch, ok):
  starts = noise.unit_starts(batch["word_ids"], ok)
  mask = noise.unit_mask(KEY, starts, ok, 0.15)
  _assert_units_whole(mask, batch["word_ids"], ok)
  rate = np.asarray(mask).sum() / np.asarray(ok).sum()
  assert 0.12 < rate <= 0.15, rate
  assert (np.asarray(mask).sum(-1) <= _budget(np.asarray(ok).sum(-1), .15)
          ).all()


def test_phrase_units_never_split(batch, ok):
  phrase = batch["phrase_ids"]
  key = jnp.where(phrase > 0, phrase, -batch["word_ids"])
  starts = noise.unit_starts(key, ok)
  mask = noise.unit_mask(KEY, starts, ok, 0.15)
  _assert_units_whole(mask, jnp.where(phrase > 0, phrase, 0) * ok, ok)
  assert np.asarray(mask & (phrase > 0)).any()


@pytest.mark.parametrize("density,mean", [(0.15, 3.0), (0.5, 2.0),
                                          (0.15, 10.0)])
def test_t5_span_mask_density_and_lengths(ok, density, mean):
  fn = jax.jit(noise.span_mask, static_argnums=(2, 3))
  mask = np.asarray(fn(KEY, ok, density, mean))
  runs, spans = [], 0
  for m, o in zip(mask, np.asarray(ok)):
    n = o.sum()
    want = int(np.clip(_budget(n, density), 1, n - 1))
    assert m[o].sum() == want
    assert not m[~o].any()
    r = _runs(_compressed(m, o))
    assert not _compressed(m, o)[0]  # T5 rows start with non-noise
    assert len(r) == max(round(want / mean), 1)
    runs += r
  # Rounding the span count makes the realised mean drift from `mean` on
  # short rows; the lengths themselves are uniform compositions.
  assert abs(np.mean(runs) - mean) < (0.1 if mean < 5 else 0.25) * mean
  assert np.std(runs) > 0


def test_geometric_lengths_mean():
  draw = jax.jit(noise.geometric_lengths, static_argnums=(1, 2, 3))
  lengths = np.asarray(draw(KEY, (20000,), 0.2, 10))
  ks = np.arange(1, 11)
  w = 0.8 ** (ks - 1)
  want = (ks * w).sum() / w.sum()
  assert lengths.min() == 1 and lengths.max() == 10
  assert abs(lengths.mean() - want) < 0.06, (lengths.mean(), want)
  assert abs(want - 3.8) < 0.05  # SpanBERT's stated mean


def test_geometric_span_mask_whole_words(batch, ok):
  starts = noise.unit_starts(batch["word_ids"], ok)
  mask = jax.jit(noise.geometric_span_mask)(KEY, starts, ok)
  _assert_units_whole(mask, batch["word_ids"], ok)
  mask, st, okn = map(np.asarray, (mask, starts, ok))
  unit_runs = []
  for m, s in zip(mask, st):
    unit_runs += _runs(m[s])
  assert max(unit_runs) <= 10
  rate = mask.sum() / okn.sum()
  assert abs(rate - 0.15) < 0.025, rate
  assert np.mean(unit_runs) > 2.5  # spans, not single words


def test_poisson_lengths_mean():
  lengths = np.asarray(jax.jit(noise.poisson_lengths, static_argnums=(1, 2))(
      KEY, (20000,), 3.5))
  assert abs(lengths.mean() - 3.5) < 0.05
  assert (lengths == 0).any()


def test_poisson_span_mask_budget_and_inserts(ok):
  mask, ins = jax.jit(noise.poisson_span_mask)(KEY, ok, 0.3, 3.5)
  mask, ins, okn = map(np.asarray, (mask, ins, ok))
  n = okn.sum(-1)
  np.testing.assert_array_equal(mask.sum(-1), _budget(n, 0.3))
  assert not (ins & mask).any() and not ((ins | mask) & ~okn).any()
  assert ins.any()
  for m, i, o in zip(mask, ins, okn):
    cm, ci = _compressed(m, o), _compressed(i, o)
    # Spans never touch: an insertion follows a gap piece.
    assert not (ci[1:] & cm[:-1]).any()


@functools.partial(jax.jit, static_argnums=2)
def _t5_pair(batch, mask, length=128):
  args = (batch["tokens"], mask, batch["doc_ids"], SP, length)
  return (transforms.noise_span_to_unique_sentinel(*args),
          transforms.nonnoise_span_to_unique_sentinel(*args))


def test_t5_corruption_keeps_each_row_on_its_device(batch):
  # On a mesh that shards rows, re-packing writes each device's own rows:
  # no collective moves the batch (explicit row indices in a scatter made
  # every device gather all rows, which cost T5 more than the mesh gave).
  rows = NamedSharding(sharding.make_mesh({"data": -1}), P("data"))
  batch = jax.device_put(batch, rows)
  mask, _ = jax.jit(noise.poisson_span_mask)(KEY, noise.eligible(
      batch["tokens"], SP), 0.15, 3.0)
  mask = jax.device_put(mask, rows)
  compiled = _t5_pair.lower(batch, mask).compile()
  assert not hlo.collectives(compiled.as_text())
  sharded = compiled(batch, mask)
  local = _t5_pair(jax.device_get(batch), jax.device_get(mask))
  for got, want in zip(jax.tree.leaves(sharded), jax.tree.leaves(local)):
    np.testing.assert_array_equal(got, want)


def test_scatter_rows_writes_each_row_and_drops_outside():
  out = jnp.full((8, 5), -1, jnp.int32)
  at = jnp.tile(jnp.array([[4, 0, 7]]), (8, 1)) + jnp.arange(8)[:, None] % 2
  values = jnp.arange(24, dtype=jnp.int32).reshape(8, 3)
  got = np.asarray(transforms.scatter_rows(out, at, values))
  want = np.full((8, 5), -1)
  for r in range(8):
    for a, v in zip(np.asarray(at[r]), np.asarray(values[r])):
      if a < 5:
        want[r, a] = v
  np.testing.assert_array_equal(got, want)


def _fill_sentinels(inp, tgt):
  """Rebuilds a document from T5 inputs and targets."""
  sentinel = lambda t: t > SP.last_regular
  spans, k = {}, None
  for t in tgt:
    if sentinel(t):
      k = SP.vocab_size - 1 - t
      spans.setdefault(k, [])
    elif t != SP.eos and k is not None:
      spans[k].append(t)
  out = []
  for t in inp:
    out += spans.get(SP.vocab_size - 1 - t, []) if sentinel(t) else [t]
  return out


def test_sentinels_numbered_in_order_and_invertible(batch, ok):
  mask = jax.jit(noise.span_mask)(KEY, ok, 0.15, 3.0)
  inp, tgt = jax.tree.map(np.asarray, _t5_pair(batch, mask))
  batch = jax.tree.map(np.asarray, batch)
  for r in range(batch["tokens"].shape[0]):
    orig = testing.docs_of({"segment_ids": batch["doc_ids"][r],
                  "tokens": batch["tokens"][r]})
    ins = testing.docs_of(jax.tree.map(lambda x: x[r], inp))
    tgs = testing.docs_of(jax.tree.map(lambda x: x[r], tgt))
    for d, toks in orig.items():
      sent = [SP.vocab_size - 1 - t for t in ins[d] if t > SP.last_regular]
      assert sent == list(range(len(sent))), sent
      assert _fill_sentinels(ins[d], tgs[d]) == toks
      assert tgs[d][-1] == SP.eos or toks[-1] != SP.eos


def test_sentinels_hand_example():
  # "Thank you for inviting me to your party last week ." with T5's mask.
  tok = jnp.arange(10, 22)[None].at[0, 11].set(SP.eos)
  mask = jnp.zeros((1, 12), bool).at[0, jnp.array([2, 3, 8])].set(True)
  doc = jnp.ones((1, 12), jnp.int32)
  inp, tgt = _t5_pair({"tokens": tok, "doc_ids": doc}, mask, 12)
  s = [SP.sentinel(i) for i in range(3)]
  np.testing.assert_array_equal(
      inp["tokens"][0], [10, 11, s[0], 14, 15, 16, 17, s[1], 19, 20, 1, 0])
  np.testing.assert_array_equal(
      tgt["tokens"][0], [s[0], 12, 13, s[1], 18, s[2], 1, 0, 0, 0, 0, 0])
  np.testing.assert_array_equal(tgt["positions"][0, :7], np.arange(7))


def test_drop_and_keep_lengths(batch, ok):
  mask = noise.iid_mask(KEY, ok, 0.15)
  drop = transforms.drop_noise_tokens(batch["tokens"], mask, batch["doc_ids"],
                                      128)
  keep = transforms.keep_noise_tokens(batch["tokens"], mask, batch["doc_ids"],
                                      SP, 128)
  valid = np.asarray(batch["doc_ids"] > 0).sum(-1)
  m = np.asarray(mask).sum(-1)
  eos = np.asarray(batch["tokens"] == SP.eos).sum(-1)
  np.testing.assert_array_equal(np.asarray(drop["segment_ids"] > 0).sum(-1),
                                valid - m)
  np.testing.assert_array_equal(np.asarray(keep["segment_ids"] > 0).sum(-1),
                                m + eos)
  tok, mk = np.asarray(batch["tokens"][0]), np.asarray(mask[0])
  np.testing.assert_array_equal(
      np.asarray(drop["tokens"][0])[:valid[0] - m[0]],
      tok[(tok > 0) & ~mk])


def test_infilling_lengths(batch, ok):
  mask, ins = jax.jit(noise.poisson_span_mask)(KEY, ok, 0.3, 3.5)
  infill = jax.jit(transforms.noise_span_to_mask, static_argnums=(4, 5))
  out = infill(batch["tokens"], mask, ins, batch["doc_ids"], SP, 128)
  mask, ins, doc = map(np.asarray, (mask, ins, batch["doc_ids"]))
  for r in range(mask.shape[0]):
    runs = sum(len(_runs(mask[r] & (doc[r] == d))) for d in np.unique(doc[r])
               if d > 0)
    n = (doc[r] > 0).sum() - mask[r].sum() + runs + ins[r].sum()
    assert (np.asarray(out["segment_ids"][r]) > 0).sum() == min(n, 128)
    assert (np.asarray(out["tokens"][r]) == SP.mask).sum() == (
        runs + ins[r].sum() if n <= 128 else
        (np.asarray(out["tokens"][r]) == SP.mask).sum())


def _assert_doc_permutation(new, old, eos_last=True):
  for r in range(old["tokens"].shape[0]):
    a = testing.docs_of({"segment_ids": new["doc_ids"][r], "tokens": new["tokens"][r]})
    b = testing.docs_of({"segment_ids": old["doc_ids"][r], "tokens": old["tokens"][r]})
    assert a.keys() == b.keys()
    for d in a:
      assert sorted(a[d]) == sorted(b[d])
      if eos_last and b[d][-1] == SP.eos:
        assert a[d][-1] == SP.eos


def test_sentence_permutation(batch):
  out = jax.jit(transforms.permute_sentences, static_argnums=2)(KEY, batch,
                                                                 SP)
  _assert_doc_permutation(out, batch)
  assert (np.asarray(out["tokens"]) != np.asarray(batch["tokens"])).any()
  # Each sentence stays contiguous and in its own order.
  for r in range(4):
    s_new = np.asarray(out["sentence_ids"][r])
    t_new, t_old = np.asarray(out["tokens"][r]), np.asarray(batch["tokens"][r])
    s_old = np.asarray(batch["sentence_ids"][r])
    d_new = np.asarray(out["doc_ids"][r])
    d_old = np.asarray(batch["doc_ids"][r])
    # A synthetic sentence may straddle an EOS: compare within documents.
    for d, sid in set(zip(d_old[t_old > 1], s_old[t_old > 1])):
      body = lambda s, t, dd: (s == sid) & (t > 1) & (dd == d)
      assert (list(t_new[body(s_new, t_new, d_new)])
              == list(t_old[body(s_old, t_old, d_old)]))
      assert (np.diff(np.flatnonzero(body(s_new, t_new, d_new))) == 1).all()


def test_document_rotation(batch):
  out = transforms.rotate_documents(KEY, batch, SP)
  _assert_doc_permutation(out, batch)
  rotated = 0
  for r in range(batch["tokens"].shape[0]):
    a = testing.docs_of({"segment_ids": out["doc_ids"][r], "tokens": out["tokens"][r]})
    b = testing.docs_of({"segment_ids": batch["doc_ids"][r],
               "tokens": batch["tokens"][r]})
    for d in a:
      x = [t for t in a[d] if t != SP.eos]
      y = [t for t in b[d] if t != SP.eos]
      assert x == y or any(x == y[i:] + y[:i] for i in range(len(y)))
      rotated += x != y
  assert rotated > 0


def test_token_shuffle(batch):
  out = transforms.shuffle_tokens(KEY, batch, SP)
  _assert_doc_permutation(out, batch)
  assert (np.asarray(out["tokens"]) != np.asarray(batch["tokens"])).mean() > .5


def test_pairs_cut_on_sentence_boundaries(batch):
  cut = segments.choose_cut(KEY, batch, SP)
  start, end = segments.doc_bounds(batch, cut, SP)
  pair = segments.build_pair(batch, start, cut - start, batch, cut, end - cut,
                             SP, 128)
  sent, doc = np.asarray(batch["sentence_ids"]), np.asarray(batch["doc_ids"])
  cut, start, end = map(np.asarray, (cut, start, end))
  tok = np.asarray(pair["tokens"])
  for r in range(cut.shape[0]):
    c = cut[r]
    assert doc[r, c] == doc[r, c - 1] == doc[r, start[r]]
    if (np.diff(sent[r]) != 0)[(doc[r, 1:] == doc[r, :-1])
                               & (np.asarray(batch["tokens"][r, 1:]) > 1)
                               & (doc[r, 1:] > 0)].any():
      assert sent[r, c] != sent[r, c - 1]
    a = int(pair["a_len"][r])
    assert tok[r, 0] == SP.cls and tok[r, a + 1] == SP.sep
    np.testing.assert_array_equal(tok[r, 1:a + 1],
                                  np.asarray(batch["tokens"][r, start[r]:c]))
    types = np.asarray(pair["token_types"][r])
    assert (types[:a + 2] == 0).all() and types[a + 2] == 1
  assert (np.asarray(pair["segment_ids"]) > 0).sum(-1).min() > 3


def test_prefix_split_and_masks(batch):
  pre = np.asarray(segments.prefix_split(KEY, batch, SP))
  doc = np.asarray(batch["doc_ids"])
  tok = np.asarray(batch["tokens"])
  for r in range(8):
    for d in np.unique(doc[r][doc[r] > 0]):
      p = pre[r][doc[r] == d]
      body = (tok[r][doc[r] == d] != SP.eos)
      assert (np.diff(p.astype(int)) <= 0).all()  # prefix comes first
      if body.sum() >= 2:
        assert p.any() and (~p & body).any()
  att = np.asarray(masks.prefix_lm_mask(jnp.asarray(pre[:2])))
  assert att.shape == (2, 128, 128)
  suffix = ~pre[0] & (doc[0] > 0)
  q = np.flatnonzero(suffix[:-1] & suffix[1:] & (doc[0, 1:] == doc[0, :-1]))[0]
  assert att[0, q, q] and not att[0, q, q + 1]
  k = np.flatnonzero(pre[0])[-1]
  assert att[0, 0, k]


def test_unilm_masks():
  modes = jnp.array([0, 1, 2, 3])
  pre = jnp.arange(6)[None].repeat(4, 0) < 3
  att = np.asarray(masks.unilm_mask(modes, pre))
  assert att.shape == (4, 6, 6)
  assert att[0].all()
  causal = np.tril(np.ones((6, 6), bool))
  np.testing.assert_array_equal(att[1], causal)
  np.testing.assert_array_equal(att[2], causal.T)  # right-to-left
  np.testing.assert_array_equal(att[3, :3], [[1, 1, 1, 0, 0, 0]] * 3)
  np.testing.assert_array_equal(att[3, 4], [1, 1, 1, 1, 1, 0])


def test_count_in_doc_restarts():
  flags = jnp.array([[1, 0, 1, 1, 0, 1]], bool)
  doc = jnp.array([[1, 1, 1, 2, 2, 2]])
  np.testing.assert_array_equal(noise.count_in_doc(flags, doc)[0],
                                [1, 1, 2, 1, 1, 2])
