"""Sentence segments and attention masks: pairs for NSP/SOP, prefixes.

Pairs are cut at a sentence boundary inside one document of a row:
segment A runs from the document's start to the cut, segment B from the cut
to the document's EOS. `build_pair` lays out `[CLS] A [SEP] B [SEP]` at a
static length. Prefixes (prefix LM, UniLM seq2seq) split every document at a
random point. All shapes are static; all randomness comes from the key.
"""

import jax
import jax.numpy as jnp

from objectives import noise as noise_lib
from objectives import transforms


def _pick(rng, candidates):
  """[B] int32 a uniformly random True position of each row (0 if none)."""
  u = jax.random.uniform(rng, candidates.shape)
  return jnp.argmax(jnp.where(candidates, u, -1.0), axis=-1).astype(jnp.int32)


def choose_cut(rng, batch, specials):
  """A sentence start inside a document, uniformly at random per row.

  Rows whose documents are single sentences fall back to any interior
  piece, so every row yields a pair.

  Args:
    rng: key.
    batch: the contract dict of [B, L] int32 arrays.
    specials: `objectives.Specials`.

  Returns:
    [B] int32 cut positions (the first piece of segment B).
  """
  tokens, doc = batch["tokens"], batch["doc_ids"]
  ok = (doc > 0) & (tokens != specials.eos)
  inner = ok & ~noise_lib.doc_starts(doc)
  sent = noise_lib.unit_starts(batch["sentence_ids"], ok) & inner
  has = sent.any(-1, keepdims=True)
  return _pick(rng, jnp.where(has, sent, inner))


def doc_bounds(batch, cut, specials):
  """Start and end (exclusive, EOS excluded) of the document holding `cut`.

  Args:
    batch: the contract dict of [B, L] int32 arrays.
    cut: [B] int32 positions.
    specials: `objectives.Specials`.

  Returns:
    ([B] int32 start, [B] int32 end).
  """
  doc = batch["doc_ids"]
  index = transforms.positions_from_segments(doc)
  start = cut - jnp.take_along_axis(index, cut[:, None], -1)[:, 0]
  here = doc == jnp.take_along_axis(doc, cut[:, None], -1)
  body = here & (batch["tokens"] != specials.eos)
  t = jnp.arange(doc.shape[-1])
  end = jnp.max(jnp.where(body, t + 1, 0), axis=-1)
  return start, end


def build_pair(first, a_start, a_len, second, b_start, b_len, specials,
               length):
  """`[CLS] A [SEP] B [SEP]` at a static length, B cut to fit.

  Args:
    first: dict of [B, L] int32 rows holding A (`tokens`, `word_ids`,
      `sentence_ids`, ...).
    a_start, a_len: [B] int32 span of A in `first`.
    second: dict with the same keys, holding B.
    b_start, b_len: [B] int32 span of B in `second`.
    specials: `objectives.Specials`.
    length: static output length T.

  Returns:
    dict of [B, T] int32: the keys of `first` gathered (`tokens` with CLS
    and SEP laid in; other keys 0 on markers, B's ids offset past A's),
    `token_types` (0 for CLS A SEP, 1 for B SEP), `segment_ids` (1 on the
    pair, 0 on padding) and `a_len`, `b_len` as [B] arrays.
  """
  a_len = jnp.clip(a_len, 1, length - 4)
  b_len = jnp.clip(b_len, 0, length - 3 - a_len)
  t = jnp.arange(length)[None, :]
  a_end, b_end = 1 + a_len[:, None], 2 + a_len[:, None] + b_len[:, None]
  out = _lay_out(first, a_start[:, None] + t - 1, (t >= 1) & (t < a_end),
                 second, b_start[:, None] + t - a_end - 1,
                 (t >= a_end + 1) & (t < b_end))
  tok = jnp.where(t == 0, specials.cls, out["tokens"])
  tok = jnp.where((t == a_end) | (t == b_end), specials.sep, tok)
  out["tokens"] = tok
  valid = t <= b_end
  out["token_types"] = ((t > a_end) & valid).astype(jnp.int32)
  out["segment_ids"] = valid.astype(jnp.int32)
  out["a_len"], out["b_len"] = a_len, b_len
  return out


def _lay_out(first, src_a, in_a, second, src_b, in_b):
  """Every key gathered from A's rows where `in_a`, B's where `in_b`."""
  last = first["tokens"].shape[-1] - 1
  src_a, src_b = jnp.clip(src_a, 0, last), jnp.clip(src_b, 0, last)
  out = {}
  for key in first:
    va = jnp.take_along_axis(first[key], src_a, -1)
    vb = jnp.take_along_axis(second[key], src_b, -1)
    if key not in ("tokens", "doc_keys"):  # B's units never merge with A's
      vb = jnp.where(vb > 0, vb + 2 * last + 2, 0)
    out[key] = jnp.where(in_a, va, jnp.where(in_b, vb, 0))
  return out


def prefix_split(rng, batch, specials):
  """Each document split at a uniform point; True on its prefix.

  The split leaves at least one piece on each side when the document has
  two; the EOS always belongs to the suffix.

  Args:
    rng: key.
    batch: the contract dict of [B, L] int32 arrays.
    specials: `objectives.Specials`.

  Returns:
    [B, L] bool: True on each document's prefix.
  """
  tokens, doc = batch["tokens"], batch["doc_ids"]
  size = tokens.shape[-1]
  ok = (doc > 0) & (tokens != specials.eos)
  n = jax.vmap(lambda o, d: jax.ops.segment_sum(
      o.astype(jnp.int32), d, num_segments=size + 1))(ok, doc)
  n_doc = jnp.take_along_axis(n, doc, axis=-1)
  u = jnp.take_along_axis(
      jax.random.uniform(rng, (doc.shape[0], size + 1)), doc, axis=-1)
  split = 1 + jnp.floor(u * jnp.maximum(n_doc - 1, 1)).astype(jnp.int32)
  index = transforms.positions_from_segments(doc)
  return ok & (index < jnp.minimum(split, n_doc))


def sentence_index(batch):
  """[B, L] int32 1, 2, ... per sentence of the row (EOS with its
  sentence), 0 on padding."""
  ok = batch["doc_ids"] > 0
  starts = noise_lib.unit_starts(batch["sentence_ids"], ok)
  starts |= ok & noise_lib.doc_starts(batch["doc_ids"])
  return jnp.where(ok, jnp.cumsum(starts, axis=-1), 0)
