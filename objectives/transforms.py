"""Inputs and targets functions: what a noise mask does to the text.

Each function takes a row's tokens, a noise mask and the document ids, and
returns a re-packed stream at a static length: a dict of `[B, length]` int32
arrays `tokens`, `segment_ids` (the document id each piece came from, 0 on
padding) and `positions` (index within its document in the new stream).
Sentinels are numbered from 0 within each document, in order, as in T5;
overflow past `length` is cut, never wrapped.
"""

import jax
import jax.numpy as jnp

from objectives import noise as noise_lib


def positions_from_segments(segment_ids):
  """[B, T] int32 index of each piece within its segment (0 at a start)."""
  t = jnp.broadcast_to(jnp.arange(segment_ids.shape[-1]), segment_ids.shape)
  first = noise_lib.doc_starts(segment_ids)
  return t - jax.lax.cummax(jnp.where(first, t, 0), axis=t.ndim - 1)


def scatter_rows(out, at, values, unique=False):
  """out [B, T] with row b's values [B, K] written at its positions at [B, K].

  Positions outside [0, T) are dropped. One scatter per row under `vmap`,
  so the batch is a scatter batch dimension: on a mesh that shards rows,
  each device writes its own rows, where explicit row indices would make
  the partitioner gather the whole batch onto every device.
  """
  def row(o, a, v):
    return o.at[a].set(v, mode="drop", unique_indices=unique)
  return jax.vmap(row)(out, at, values)


def emit(counts, first, second, doc_ids, length, extra=None):
  """Re-packs a row where each position emits 0, 1 or 2 pieces.

  Args:
    counts: [B, L] int32 in {0, 1, 2}: pieces each position emits.
    first: [B, L] int32 the piece emitted first (when counts >= 1).
    second: [B, L] int32 the piece emitted second (when counts == 2).
    doc_ids: [B, L] int32 document of each position.
    length: static output length T.
    extra: optional dict name -> [B, L] int32 carried like `doc_ids` (the
      value of the emitting position).

  Returns:
    dict of [B, T] int32: `tokens`, `segment_ids`, `positions`, the keys of
    `extra`, and `source` (the position each piece came from, -1 on pad).
  """
  b, size = counts.shape
  start = jnp.cumsum(counts, axis=-1) - counts
  at1 = jnp.where(counts >= 1, start, length)
  at2 = jnp.where(counts == 2, start + 1, length)

  def put(v1, v2, fill=0):
    out = jnp.full((b, length), fill, jnp.int32)
    out = scatter_rows(out, at1, v1.astype(jnp.int32))
    return scatter_rows(out, at2, v2.astype(jnp.int32))

  src = jnp.broadcast_to(jnp.arange(size), (b, size))
  out = {"tokens": put(first, second), "segment_ids": put(doc_ids, doc_ids),
         "source": put(src, src, -1)}
  for name, v in (extra or {}).items():
    out[name] = put(v, v)
  out["positions"] = positions_from_segments(out["segment_ids"])
  return out


def _runs(mask, doc_ids):
  """Run starts of `mask` (split at documents) and their index in the doc."""
  starts = mask & (~noise_lib.shift_in(mask, False)
                   | noise_lib.doc_starts(doc_ids))
  return starts, noise_lib.count_in_doc(starts, doc_ids)


def _sentinel(index, specials):
  return specials.sentinel(jnp.clip(index, 0, specials.num_sentinels - 1))


def noise_span_to_unique_sentinel(tokens, mask, doc_ids, specials, length):
  """Inputs: each noise span becomes one sentinel (span k -> sentinel k).

  Args:
    tokens, doc_ids: [B, L] int32.
    mask: [B, L] bool noise.
    specials: `objectives.Specials`.
    length: static output length.

  Returns:
    the `emit` dict, [B, length].
  """
  starts, index = _runs(mask, doc_ids)
  counts = jnp.where(mask & ~starts, 0, 1) * (doc_ids > 0)
  first = jnp.where(starts, _sentinel(index - 1, specials), tokens)
  return emit(counts, first, first, doc_ids, length)


def nonnoise_span_to_unique_sentinel(tokens, mask, doc_ids, specials,
                                     length):
  """Targets: the noise spans, each after its sentinel; EOS closes a doc.

  Matches `noise_span_to_unique_sentinel`: the sentinel before noise span k
  is sentinel k. As in T5, each non-noise run (EOS excluded) becomes a
  sentinel, so a trailing non-noise run ends with one more sentinel.

  Returns:
    the `emit` dict, [B, length].
  """
  eos = tokens == specials.eos
  keep = ~mask & ~eos & (doc_ids > 0)
  k_starts, _ = _runs(keep, doc_ids)
  n_starts, n_index = _runs(mask, doc_ids)
  lead = n_starts & noise_lib.doc_starts(doc_ids)
  counts = (mask.astype(jnp.int32) + lead + k_starts + eos) * (doc_ids > 0)
  first = jnp.where(k_starts, _sentinel(n_index, specials), tokens)
  first = jnp.where(lead, _sentinel(0, specials), first)
  return emit(counts, first, tokens, doc_ids, length)


def drop_noise_tokens(tokens, mask, doc_ids, length):
  """Deletion: noised pieces removed, the rest re-packed to `length`."""
  counts = (~mask & (doc_ids > 0)).astype(jnp.int32)
  return emit(counts, tokens, tokens, doc_ids, length)


def keep_noise_tokens(tokens, mask, doc_ids, specials, length):
  """Only the noised pieces (and each document's EOS), re-packed."""
  counts = ((mask | (tokens == specials.eos)) & (doc_ids > 0))
  return emit(counts.astype(jnp.int32), tokens, tokens, doc_ids, length)


def noise_span_to_mask(tokens, mask, inserts, doc_ids, specials, length):
  """BART infilling: each span, zero-length ones included, becomes one mask.

  Args:
    tokens, doc_ids: [B, L] int32.
    mask: [B, L] bool noise spans.
    inserts: [B, L] bool zero-length spans, a mask inserted before.
    specials: `objectives.Specials`.
    length: static output length.

  Returns:
    the `emit` dict, [B, length].
  """
  starts, _ = _runs(mask, doc_ids)
  counts = jnp.where(mask & ~starts, 0, 1) + (inserts & ~mask)
  counts = counts * (doc_ids > 0)
  first = jnp.where(starts | inserts, specials.mask, tokens)
  return emit(counts, first, tokens, doc_ids, length)


def gather_rows(batch, order):
  """Every [B, L] array of `batch` reordered by `order` [B, L]."""
  return {k: jnp.take_along_axis(v, order, axis=-1) for k, v in batch.items()}


def sort_within_docs(doc_ids, key):
  """Order [B, L] that sorts each document's positions by float `key`
  (ties in position order); documents stay in place, padding (doc id 0)
  last."""
  t = jnp.broadcast_to(jnp.arange(doc_ids.shape[-1]), doc_ids.shape)
  doc = jnp.where(doc_ids > 0, doc_ids, jnp.iinfo(jnp.int32).max)
  return jnp.lexsort((t, key, doc), axis=-1)


def permute_sentences(rng, batch, specials):
  """BART sentence permutation: sentences shuffled within each document.

  Each document keeps its closing EOS last. Every key of `batch` ([B, L]
  arrays) moves with its piece.

  Returns:
    the permuted batch dict.
  """
  tokens, doc = batch["tokens"], batch["doc_ids"]
  ok = (doc > 0) & (tokens != specials.eos)
  unit = jnp.cumsum(noise_lib.unit_starts(batch["sentence_ids"], ok), -1)
  u = jax.random.uniform(rng, tokens.shape)
  key = jnp.where(ok, jnp.take_along_axis(u, unit, axis=-1), 2.0)
  return gather_rows(batch, sort_within_docs(doc, key))


def shuffle_tokens(rng, batch, specials, keys=None):
  """T5 deshuffling input: pieces shuffled within each document (EOS last).

  `keys` [B, L] floats in [0, 1), when given, order the pieces instead of
  uniform draws from `rng` (scoring's fixed shuffle).
  """
  tokens, doc = batch["tokens"], batch["doc_ids"]
  ok = (doc > 0) & (tokens != specials.eos)
  if keys is None:
    keys = jax.random.uniform(rng, tokens.shape)
  key = jnp.where(ok, keys, 2.0)
  return gather_rows(batch, sort_within_docs(doc, key))


def rotate_documents(rng, batch, specials):
  """BART document rotation: each document starts at a random piece.

  The pieces before the closing EOS rotate; EOS stays last.

  Returns:
    the rotated batch dict.
  """
  tokens, doc = batch["tokens"], batch["doc_ids"]
  size = tokens.shape[-1]
  ok = (doc > 0) & (tokens != specials.eos)
  index = positions_from_segments(doc)
  start = jnp.broadcast_to(jnp.arange(size), doc.shape) - index
  n = jax.vmap(lambda o, d: jax.ops.segment_sum(
      o.astype(jnp.int32), d, num_segments=size + 1))(ok, doc)
  n_doc = jnp.maximum(jnp.take_along_axis(n, doc, axis=-1), 1)
  u = jax.random.uniform(rng, (doc.shape[0], size + 1))
  shift = jnp.floor(jnp.take_along_axis(u, doc, axis=-1) * n_doc)
  src = start + (index + shift.astype(jnp.int32)) % n_doc
  order = jnp.where(ok, src, jnp.arange(size))
  return gather_rows(batch, order)
