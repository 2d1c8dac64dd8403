"""XLNet's permutation noise: span targets, a factorisation order, masks.

Yang et al. 2019 (XLNet), section 2.3 and appendix A.2. Each step, inside
jit from the step's rng, a row of the pretraining batch becomes:

1. Targets (`span_targets`): each document's ordinary pieces (`noise.
   eligible`: never pad, EOS or markers) are tiled into consecutive
   contexts of K * L pieces, L drawn from 1..`max_span` with P(L) ~ 1/L
   (the release's `_sample_mask`; the paper gives no law); one span of L
   consecutive pieces at a random offset in each context is predicted, so
   about 1/K of each document's pieces are targets (the paper's "span of L
   tokens within a context of KL tokens"). A document's last, shorter
   context of r pieces holds a span of min(L, r // K) pieces, so no row
   ever has more than T // K targets. Spans run over pieces, not words
   (the release grows whole-word n-grams; the paper speaks of tokens).
2. A factorisation order (`factorisation_ranks`): non-targets first, then
   targets in random order (partial prediction: only the last ~1/K of the
   order is predicted). `order="paper"` draws a random order among the
   non-targets too, a full permutation as the paper's objective states;
   `order="release"` gives every non-target one shared rank below every
   target, so non-targets see each other bidirectionally, as the released
   `_local_perm` does (its non-masked tokens get index -1).
3. Masks (`masks_from_order`): `perm_mask[b, i, j] = 1` (i may not attend
   to j) where j comes after i in the order, or j is i itself and a
   target, or j lies in another document or padding; `target_mapping`
   [B, K, T] one-hot rows at the targets, in position order, and all-zero
   rows (weight 0) for unused slots. The model lets every content state
   see itself, so the content stream of i sees j iff j precedes i or
   j == i, and the query stream of a target sees only what precedes it.

No piece is corrupted: the content stream reads the true row, the query
stream only positions. Letters: B batch, T length, K prediction slots.
"""

import math

import jax
import jax.numpy as jnp

from objectives import common
from objectives import noise

ORDERS = ("paper", "release")


def num_slots(length, ratio):
  """Static K: prediction slots for rows of `length` at 1/`ratio` targets.

  `span_targets` never predicts more than length // ratio pieces of a row.
  """
  return max(1, math.ceil(length / ratio))


def _doc_sizes(ok, doc_ids):
  """[B, T] int32: ordinary pieces of each position's document."""
  size = doc_ids.shape[-1]
  n = jax.vmap(lambda o, d: jax.ops.segment_sum(
      o.astype(jnp.int32), d, num_segments=size + 1))(ok, doc_ids)
  return jnp.take_along_axis(n, doc_ids, axis=-1)


def _span_lengths(rng, shape, max_span):
  """int32 span lengths in 1..max_span with P(L) proportional to 1/L."""
  lengths = jnp.arange(1, max_span + 1)
  return jax.random.categorical(rng, -jnp.log(lengths), shape=shape) + 1


def span_targets(rng, ok, doc_ids, ratio=6, max_span=5):
  """XLNet's span-based target selection, about 1/`ratio` of each document.

  Contexts are laid per row from one random sequence of span lengths; the
  document starting at position p reads it from entry p on, so documents
  of one row get different contexts.

  Args:
    rng: key.
    ok: [B, T] bool pieces that may be predicted (`noise.eligible`).
    doc_ids: [B, T] int32 documents, 0 on padding.
    ratio: K, pieces per predicted piece.
    max_span: the longest span L.

  Returns:
    [B, T] bool targets: spans of consecutive `ok` pieces, at most
    T // ratio per row.
  """
  b, t = ok.shape
  k_len, k_off = jax.random.split(rng)
  lengths = _span_lengths(k_len, (b, 2 * t), max_span)
  edges = jnp.concatenate([jnp.zeros((b, 1), jnp.int32),
                           jnp.cumsum(ratio * lengths, axis=-1)], axis=-1)
  pos = jnp.broadcast_to(jnp.arange(t), (b, t))
  first = jax.lax.cummax(jnp.where(noise.doc_starts(doc_ids), pos, 0),
                         axis=1)  # each position's document start
  base = jnp.take_along_axis(edges, first, axis=-1)
  index = noise.count_in_doc(ok, doc_ids) - 1  # among the doc's ok pieces
  block = jnp.maximum(jax.vmap(lambda e, v: jnp.searchsorted(
      e, v, side="right"))(edges, index + base) - 1, 0)
  start = jnp.take_along_axis(edges, block, axis=-1) - base
  room = jnp.minimum(ratio * jnp.take_along_axis(lengths, block, axis=-1),
                     _doc_sizes(ok, doc_ids) - start)
  span = jnp.minimum(room // ratio, jnp.take_along_axis(lengths, block, -1))
  u = jnp.take_along_axis(jax.random.uniform(k_off, (b, 2 * t)), block, -1)
  offset = start + jnp.floor(u * (room - span + 1)).astype(jnp.int32)
  return ok & (doc_ids > 0) & (index >= offset) & (index < offset + span)


def factorisation_ranks(rng, targets, order="paper"):
  """Each position's place in a random factorisation order.

  Args:
    rng: key.
    targets: [B, T] bool predicted positions.
    order: "paper" (a random order of the non-targets, then of the
      targets) or "release" (every non-target at rank -1, then the targets
      in random order).

  Returns:
    [B, T] int32 ranks; targets rank above every non-target, distinct.
  """
  if order not in ORDERS:
    raise ValueError(f"unknown factorisation order {order!r}; "
                     f"orders: {ORDERS}")
  u = jax.random.uniform(rng, targets.shape) + targets  # targets last
  ranks = jnp.argsort(jnp.argsort(u, axis=-1), axis=-1).astype(jnp.int32)
  if order == "release":
    ranks = jnp.where(targets, ranks, -1)
  return ranks


def masks_from_order(ranks, targets, doc_ids, slots):
  """XLNet's attention masks and prediction slots from an order.

  Args:
    ranks: [B, T] int32 places in the factorisation order; ties are only
      allowed among non-targets (which then see each other).
    targets: [B, T] bool predicted positions, at most `slots` per row.
    doc_ids: [B, T] int32 documents, 0 on padding.
    slots: static K.

  Returns:
    dict with `perm_mask` [B, T, T] bool (True = i may not attend to j),
    `target_mapping` [B, K, T] float32, `target_at` [B, K] int32 positions
    and `weights` [B, K] bool (False on unused slots).
  """
  later = ranks[:, None, :] > ranks[:, :, None]
  tied_target = (ranks[:, None, :] == ranks[:, :, None]) & targets[:, None]
  other_doc = doc_ids[:, None, :] != doc_ids[:, :, None]
  perm_mask = later | tied_target | other_doc | (doc_ids == 0)[:, None]
  at, weights = common.prediction_positions(targets, slots)
  t = doc_ids.shape[-1]
  mapping = jax.nn.one_hot(at, t, dtype=jnp.float32) * weights[..., None]
  return {"perm_mask": perm_mask, "target_mapping": mapping,
          "target_at": at, "weights": weights}


def permute(rng, batch, specials, ratio=6, max_span=5, order="paper"):
  """The whole permutation noise of a pretraining batch.

  Args:
    rng: key.
    batch: the contract dict of [B, T] int32 arrays (`tokens`, `doc_ids`).
    specials: `objectives.Specials`.
    ratio, max_span: see `span_targets`. order: see `factorisation_ranks`.

  Returns:
    `masks_from_order`'s dict plus `mask` [B, T] bool targets, `ranks`
    [B, T] int32 and `targets` [B, K] int32 ids, K = `num_slots(T, ratio)`.
  """
  k_span, k_order = jax.random.split(rng)
  tokens, doc = batch["tokens"], batch["doc_ids"]
  mask = span_targets(k_span, noise.eligible(tokens, specials), doc, ratio,
                      max_span)
  ranks = factorisation_ranks(k_order, mask, order)
  out = masks_from_order(ranks, mask, doc, num_slots(tokens.shape[-1], ratio))
  targets = jnp.take_along_axis(tokens, out["target_at"], axis=-1)
  return dict(out, mask=mask, ranks=ranks, targets=targets)
