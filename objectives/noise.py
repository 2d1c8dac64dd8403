"""Noise masks shared by every scheme: which positions a scheme corrupts.

T5-style composition: a scheme draws a noise mask here, then turns it into
model inputs and targets with `objectives.transforms` (sentinels, deletion,
infilling, permutations) or `objectives.segments` (sentence pairs, attention
masks). Everything is a pure `jnp` function of a `jax.random` key and the
batch contract's int32 `[B, L]` arrays, with static shapes, so it runs inside
`jax.jit` on every step with fresh randomness.

Masks never touch padding, EOS or other special pieces (`eligible`). Because
every document ends with an EOS that is never noised, a span can never run
from one document into the next.
"""

import jax
import jax.numpy as jnp


def eligible(tokens, specials):
  """Positions noise may touch: ordinary pieces, not pad, EOS or markers.

  Args:
    tokens: [B, L] int32 ids.
    specials: `objectives.Specials`.

  Returns:
    [B, L] bool.
  """
  out = tokens != specials.pad
  for tid in (specials.eos, specials.cls, specials.sep, specials.bos,
              specials.mask):
    out &= tokens != tid
  return out


def shift_in(x, fill):
  """`x` moved one step right along the last axis, `fill` entering first."""
  pad = jnp.full(x.shape[:-1] + (1,), fill, x.dtype)
  return jnp.concatenate([pad, x[..., :-1]], axis=-1)


def unit_starts(ids, ok):
  """First position of every unit: a run of `ok` positions sharing an id.

  Args:
    ids: [B, L] int32 unit ids (word_ids, phrase_ids, sentence_ids).
    ok: [B, L] bool positions that belong to some unit.

  Returns:
    [B, L] bool, True where a unit begins.
  """
  return ok & (~shift_in(ok, False) | (ids != shift_in(ids, -1)))


def doc_starts(doc_ids):
  """[B, L] bool: True where a document (or the padding) begins."""
  return doc_ids != shift_in(doc_ids, -1)


def count_in_doc(flags, doc_ids):
  """Inclusive running count of `flags` that restarts at every document.

  Args:
    flags: [B, L] bool.
    doc_ids: [B, L] int32.

  Returns:
    [B, L] int32: number of True flags at or before t in t's document.
  """
  total = jnp.cumsum(flags.astype(jnp.int32), axis=-1)
  before = total - flags.astype(jnp.int32)
  base = jnp.where(doc_starts(doc_ids), before, 0)
  return total - jax.lax.cummax(base, axis=base.ndim - 1)


def _rank(rng, ok):
  """Random rank of each `ok` position among the `ok` ones; others last."""
  scores = jnp.where(ok, jax.random.uniform(rng, ok.shape), 2.0)
  order = jnp.argsort(scores)
  return jnp.zeros_like(order).at[order].set(jnp.arange(ok.shape[-1]))


def _budget(n, rate):
  """Number of items a rate picks out of n (at least one when n > 0)."""
  k = jnp.round(n.astype(jnp.float32) * rate).astype(jnp.int32)
  return jnp.where(n > 0, jnp.clip(k, 1, n), 0)


def iid_mask(rng, ok, rate, exact=True):
  """Independent token noise, BERT's 15%.

  Args:
    rng: key.
    ok: [B, L] bool positions that may be noised (see `eligible`).
    rate: fraction of the `ok` positions to noise.
    exact: True picks exactly round(rate * n) positions per row (BERT's
      create_pretraining_data); False draws each one Bernoulli(rate).

  Returns:
    [B, L] bool noise mask.
  """
  if not exact:
    return ok & jax.random.bernoulli(rng, rate, ok.shape)
  keys = jax.random.split(rng, ok.shape[0])
  ranks = jax.vmap(_rank)(keys, ok)
  k = _budget(ok.sum(-1), rate)
  return ok & (ranks < k[:, None])


def unit_mask(rng, starts, ok, rate):
  """Whole-unit noise (whole words, phrases): a unit is never split.

  Units are visited in random order and taken while the noised token count
  stays within round(rate * n) (BERT's whole-word masking).

  Args:
    rng: key.
    starts: [B, L] bool unit starts (`unit_starts`).
    ok: [B, L] bool positions inside units.
    rate: fraction of `ok` tokens to noise.

  Returns:
    [B, L] bool noise mask.
  """
  def row(key, st, okr):
    unit = jnp.cumsum(st) - 1
    size = jax.ops.segment_sum(okr.astype(jnp.int32), jnp.where(okr, unit, n),
                               num_segments=n + 1)[:n]
    rank = _rank(key, jnp.arange(n) < st.sum())
    order = jnp.argsort(rank)
    taken_sorted = jnp.cumsum(size[order]) <= _budget(okr.sum(), rate)
    taken = jnp.zeros(n, bool).at[order].set(taken_sorted)
    return okr & taken[jnp.clip(unit, 0, n - 1)]
  n = ok.shape[-1]
  return jax.vmap(row)(jax.random.split(rng, ok.shape[0]), starts, ok)


def _segmentation(rng, num_items, num_segments, size):
  """Random split of num_items into num_segments non-empty parts.

  Returns [size] int32 part lengths, the first num_segments non-zero.
  """
  pos = jnp.arange(size)
  inner = (pos >= 1) & (pos < num_items)
  first = inner & (_rank(rng, inner) < num_segments - 1)
  first = first.at[0].set(True)
  seg = jnp.cumsum(first) - 1
  return jax.ops.segment_sum((pos < num_items).astype(jnp.int32), seg,
                             num_segments=size)


def _to_rows(item_mask, ok):
  """Maps a mask over the row's `ok` items (compressed) back to positions."""
  idx = jnp.clip(jnp.cumsum(ok, axis=-1) - 1, 0, ok.shape[-1] - 1)
  return ok & jnp.take_along_axis(item_mask, idx, axis=-1)


def span_mask(rng, ok, density=0.15, mean_length=3.0):
  """T5's random_spans_noise_mask over each row's `ok` positions.

  Exactly round(n * density) noised positions in round(noise / mean_length)
  spans with uniformly random lengths and gaps; a row starts with non-noise.

  Args:
    rng: key.
    ok: [B, L] bool positions that may be noised.
    density: fraction of noised positions.
    mean_length: mean span length.

  Returns:
    [B, L] bool noise mask.
  """
  size = ok.shape[-1]

  def row(key, n):
    k_noise, k_keep = jax.random.split(key)
    num_noise = jnp.clip(jnp.round(n * density).astype(jnp.int32), 1,
                         jnp.maximum(n - 1, 1))
    num_spans = jnp.maximum(
        jnp.round(num_noise / mean_length).astype(jnp.int32), 1)
    noise = _segmentation(k_noise, num_noise, num_spans, size)
    keep = _segmentation(k_keep, n - num_noise, num_spans, size)
    lengths = jnp.stack([keep, noise], axis=1).reshape(-1)
    starts = jnp.cumsum(lengths)[:-1]
    hits = jax.ops.segment_sum(jnp.ones_like(starts), starts,
                               num_segments=size + 1)[:size]
    return (jnp.cumsum(hits) % 2 == 1) & (n >= 2)

  items = jax.vmap(row)(jax.random.split(rng, ok.shape[0]), ok.sum(-1))
  return _to_rows(items, ok)


def geometric_lengths(rng, shape, p=0.2, max_length=10):
  """Span lengths from Geometric(p) truncated to [1, max_length] (SpanBERT).

  Truncation renormalises the distribution, which gives SpanBERT's mean of
  3.8 for p=0.2 and 10.
  """
  ks = jnp.arange(1, max_length + 1)
  logits = (ks - 1) * jnp.log1p(-p)
  return jax.random.categorical(rng, logits, shape=shape) + 1


def poisson_lengths(rng, shape, lam=3.0):
  """Span lengths from Poisson(lam), zeros included (BART infilling)."""
  return jax.random.poisson(rng, lam, shape).astype(jnp.int32)


def _place(rng, lengths, active, n):
  """Places spans at random, disjoint and never adjacent, over n items.

  Args:
    rng: key.
    lengths: [K] int32 span lengths (zero = an insertion point).
    active: [K] bool spans to place (a prefix).
    n: int32 scalar, number of items.

  Returns:
    ([n_max] bool noised items, [n_max] bool insertion-before items), with
    n_max = K static (callers pass K = L).
  """
  size = lengths.shape[0]
  lengths = jnp.where(active, lengths, 0)
  k = active.sum()
  free = jnp.maximum(n - lengths.sum() - jnp.maximum(k - 1, 0), 0)
  slots = jnp.arange(2 * size)
  bars = (_rank(rng, slots < free + k) < k) & (slots < free + k)
  bar_pos = jnp.sort(jnp.where(bars, slots, 4 * size))[:size]
  before = jnp.cumsum(lengths) - lengths
  span = jnp.arange(size)
  # bar_pos[j] = (free items before span j) + j earlier bars, and each
  # earlier span also brings one forced gap item: the two j's cancel.
  start = bar_pos + before
  start = jnp.where(active, start, 4 * size)
  edges = jnp.zeros(size + 1, jnp.int32)
  edges = edges.at[start].add(1, mode="drop")
  edges = edges.at[start + lengths].add(-1, mode="drop")
  noised = jnp.cumsum(edges)[:size] > 0
  inserts = jnp.zeros(size + 1, bool).at[
      jnp.where(lengths == 0, start, 4 * size)].set(True, mode="drop")
  return noised & (span < n), inserts[:size] & (span < n)


def _budgeted(lengths, budget):
  """Active prefix of spans whose lengths fill `budget`, last one trimmed."""
  before = jnp.cumsum(lengths) - lengths
  active = before < budget
  return jnp.minimum(lengths, jnp.maximum(budget - before, 0)), active


def geometric_span_mask(rng, starts, ok, rate=0.15, p=0.2, max_length=10):
  """SpanBERT spans: whole units, Geometric(p) unit lengths, a rate budget.

  Args:
    rng: key.
    starts: [B, L] bool unit (word) starts, see `unit_starts`.
    ok: [B, L] bool positions inside units.
    rate: fraction of units (hence, on average, of tokens) to noise.
    p, max_length: the truncated geometric span-length distribution.

  Returns:
    [B, L] bool noise mask; units are never split.
  """
  b, size = ok.shape
  k_len, k_place = jax.random.split(rng)
  lengths = geometric_lengths(k_len, (b, size), p, max_length)
  n_units = starts.sum(-1)
  lengths, active = jax.vmap(_budgeted)(lengths, _budget(n_units, rate))
  place = jax.vmap(_place)
  units, _ = place(jax.random.split(k_place, b), lengths, active, n_units)
  return ok & _unit_follow(units, starts, ok)


def _unit_follow(units, starts, ok):
  """For each position, whether its unit (by start) is noised."""
  unit = jnp.clip(jnp.cumsum(starts, axis=-1) - 1, 0, ok.shape[-1] - 1)
  return jnp.take_along_axis(units, unit, axis=-1)


def poisson_span_mask(rng, ok, rate=0.3, lam=3.0):
  """BART text-infilling spans: Poisson(lam) lengths, zero-length included.

  Args:
    rng: key.
    ok: [B, L] bool positions that may be noised.
    rate: fraction of `ok` positions to noise.
    lam: Poisson mean span length.

  Returns:
    ([B, L] bool noise mask, [B, L] bool insertion points): a zero-length
    span inserts one mask before its position.
  """
  b, size = ok.shape
  k_len, k_place = jax.random.split(rng)
  lengths = poisson_lengths(k_len, (b, size), lam)
  n = ok.sum(-1)
  lengths, active = jax.vmap(_budgeted)(lengths, _budget(n, rate))
  items, inserts = jax.vmap(_place)(jax.random.split(k_place, b), lengths,
                                    active, n)
  return _to_rows(items, ok), _to_rows(inserts, ok)


def replace_tokens(rng, tokens, mask, specials, mask_rate=0.8,
                   random_rate=0.1, groups=None):
  """BERT's corruption of noised positions: [MASK], a random piece, or kept.

  Args:
    rng: key.
    tokens: [B, L] int32 ids.
    mask: [B, L] bool noised positions.
    specials: `objectives.Specials`.
    mask_rate, random_rate: shares of [MASK] and random pieces; the rest of
      the noised positions keep their piece.
    groups: optional [B, L] int32 in [0, L): positions of one group share
      the choice (SpanBERT decides per span); None decides per piece.

  Returns:
    [B, L] int32 corrupted ids.
  """
  k_pick, k_rand = jax.random.split(rng)
  u = jax.random.uniform(k_pick, tokens.shape)
  if groups is not None:
    u = jnp.take_along_axis(u, groups, axis=-1)
  rand = jax.random.randint(k_rand, tokens.shape, specials.first_regular,
                            specials.last_regular + 1, dtype=tokens.dtype)
  out = jnp.where(mask & (u < mask_rate), specials.mask, tokens)
  pick_rand = mask & (u >= mask_rate) & (u < mask_rate + random_rate)
  return jnp.where(pick_rand, rand, out)


def fragment_mask(rng, batch, specials, ratio=0.5):
  """MASS: one contiguous fragment of each document, ~ratio of its pieces.

  Args:
    rng: key.
    batch: the contract dict of [B, L] int32 arrays.
    specials: `objectives.Specials`.
    ratio: fragment length as a fraction of the document's pieces (EOS
      excluded), at least one piece.

  Returns:
    [B, L] bool noise mask.
  """
  doc = batch["doc_ids"]
  ok = eligible(batch["tokens"], specials) & (doc > 0)
  size = doc.shape[-1]
  n = jax.vmap(lambda o, d: jax.ops.segment_sum(
      o.astype(jnp.int32), d, num_segments=size + 1))(ok, doc)
  n_doc = jnp.take_along_axis(n, doc, axis=-1)
  m = jnp.maximum(jnp.round(n_doc * ratio).astype(jnp.int32), 1)
  u = jnp.take_along_axis(jax.random.uniform(rng, (doc.shape[0], size + 1)),
                          doc, axis=-1)
  start = jnp.floor(u * (n_doc - m + 1)).astype(jnp.int32)
  index = count_in_doc(ok, doc) - 1
  return ok & (index >= start) & (index < start + m)


def consecutive_spans(rng, n, length, rate=0.15, span=7):
  """Mockingjay's consecutive masking: non-overlapping spans of `span`
  positions covering round(rate * n / span) * span of each row's first n
  (at least one span where n >= span; none in a shorter row).

  Every placement of the k spans in [0, n) is equally likely: k distinct
  slots of n - k * (span - 1) are drawn, sorted, and the i-th moved right
  by i * (span - 1).

  Args:
    rng: key.
    n: [B] int32, each row's real positions (a prefix of the row).
    length: L, the rows' length (static).
    rate: the share of positions masked (before rounding to whole spans).
    span: positions per span.

  Returns:
    starts [B, K] int32 and live [B, K] bool (K = the most spans a row of
    L can hold at `rate`, live the row's k of them), and the mask [B, L]
    bool.
  """
  most = max(1, int(round(rate * length / span)))
  k = jnp.round(n.astype(jnp.float32) * rate / span).astype(jnp.int32)
  k = jnp.clip(k, 1, jnp.minimum(most, n // span))
  slots = n - k * (span - 1)
  pos = jnp.arange(length)
  scores = jax.random.uniform(rng, (n.shape[0], length))
  scores = jnp.where(pos[None] < slots[:, None], scores, 2.0)
  chosen = jnp.argsort(scores, axis=-1)[:, :most]  # random distinct slots
  live = jnp.arange(most)[None] < k[:, None]
  chosen = jnp.sort(jnp.where(live, chosen, length), axis=-1)
  starts = (chosen + jnp.arange(most)[None] * (span - 1)).astype(jnp.int32)
  return starts, live, span_cover(starts, live, span, length).any(axis=1)


def span_cover(starts, live, span, length):
  """[B, K, L] bool: position t lies in live span k ([start, start+span))."""
  pos = jnp.arange(length)[None, None]
  return ((pos >= starts[..., None]) & (pos < starts[..., None] + span)
          & live[..., None])
