"""Attention masks: boolean, True where query t may attend to key s.

Shapes [B, T, S]; a leading 1 broadcasts over the batch. Every kind the
zoo needs (padding, packed documents, causal, prefix-LM / UniLM
sequence-to-sequence, arbitrary) is one of these or their AND
(`combine_masks`). `zoo.models.layers` re-exports them all.
"""

import flax.struct
import jax
import jax.numpy as jnp

Array = jax.Array


@flax.struct.dataclass
class Segmented:
  """A self-attention mask with the structure a fused kernel reads.

  `dense` is the mask ([B, T, T] bool, what the einsum path applies);
  `segments` ([B, T] int, 0 = padding) and `causal` (static) say the same:
  a query sees the non-padding keys of its document, up to itself when
  causal. `layers.attention` takes either this or a plain array.
  """
  dense: Array
  segments: Array
  causal: bool = flax.struct.field(pytree_node=False, default=False)


def self_attention(segments: Array, causal: bool = False,
                   extra: Array | None = None):
  """The self-attention mask of packed documents: `Segmented`, or the plain
  [B, T, T] array when an `extra` mask (AND-ed in) has no such structure.

  Args:
    segments: [B, T] int document ids, 0 = padding.
    causal: keys up to the query only.
    extra: [B|1, T, T] bool, or None.
  """
  dense = combine_masks(document_mask(segments, extra),
                        causal_mask(segments.shape[1]) if causal else None)
  return dense if extra is not None else Segmented(dense, segments, causal)


def segment_mask(q_segments: Array, k_segments: Array | None = None) -> Array:
  """Padding and packed-document mask.

  Args:
    q_segments: [B, T] int, 0 = padding, equal non-zero ids = one document.
    k_segments: [B, S] int, defaults to `q_segments`.

  Returns:
    [B, T, S] bool: key non-padding and in the query's document.
  """
  k_segments = q_segments if k_segments is None else k_segments
  return ((q_segments[:, :, None] == k_segments[:, None, :])
          & (k_segments[:, None, :] != 0))


def arange_positions(tokens: Array, positions: Array | None = None) -> Array:
  """`positions`, or int32 [B,T] arange(T) per row when None (the default
  the masks here assume: positions count within the row)."""
  if positions is not None:
    return positions
  return jnp.broadcast_to(jnp.arange(tokens.shape[1], dtype=jnp.int32),
                          tokens.shape)


def real_segments(tokens: Array, pad_id: int,
                  segment_ids: Array | None = None) -> Array:
  """int32 [B,T]: `segment_ids`, or, when None, one document per row made
  of the non-padding tokens (1 on them, 0 on padding)."""
  if segment_ids is not None:
    return segment_ids
  return (tokens != pad_id).astype(jnp.int32)


def document_mask(segment_ids: Array, mask: Array | None = None) -> Array:
  """[B,T,T] bool self-attention mask of an encoder: same document,
  non-padding key (`segment_mask`), AND an optional extra mask."""
  return combine_masks(segment_mask(segment_ids), mask)


def key_padding_mask(k_segments: Array, q_length: int) -> Array:
  """[B, S] int (0 = pad) -> [B, T, S] bool: every query sees real keys."""
  keep = k_segments != 0
  return jnp.broadcast_to(keep[:, None, :],
                          (keep.shape[0], q_length, keep.shape[1]))


def causal_mask(q_length: int, k_length: int | None = None) -> Array:
  """[1, T, S] bool: key index <= query index (aligned at the end)."""
  k_length = q_length if k_length is None else k_length
  q = jnp.arange(q_length)[:, None] + (k_length - q_length)
  return (jnp.arange(k_length)[None, :] <= q)[None]


def prefix_lm_mask(is_prefix: Array) -> Array:
  """Prefix-LM mask: bidirectional over the prefix, causal after it.

  A prefix query sees every prefix key; a later query sees the prefix and
  the keys up to itself. This is also UniLM's sequence-to-sequence mask
  (source = prefix). Packed rows give each document its own prefix: AND
  the result with `segment_mask`, which keeps documents apart.

  Args:
    is_prefix: [B, T] bool, True on prefix (source) tokens.

  Returns:
    [B, T, T] bool.
  """
  suffix_query = ~is_prefix[:, :, None] & causal_mask(is_prefix.shape[-1])
  return is_prefix[:, None, :] | suffix_query


def prefix_from_lengths(prefix_lengths: Array, length: int) -> Array:
  """[B] int prefix lengths -> [B, T] bool `is_prefix` (the first ones)."""
  return jnp.arange(length)[None, :] < prefix_lengths[:, None]


def branch_mask(branches: Array) -> Array:
  """One shared prefix and private branches in a row: a key of the prefix
  (branch 0) is seen by every query, a key of branch b > 0 by branch b's
  queries only (e.g. every label string after one copy of a prompt,
  `zoo.finetune.rank`). AND the result with the causal and segment masks.

  Args:
    branches: [B, T] int, 0 on the shared prefix, b > 0 on branch b.

  Returns:
    [B, T, T] bool.
  """
  keys = branches[:, None, :]
  return (keys == 0) | (keys == branches[:, :, None])


BIDIRECTIONAL, LEFT_TO_RIGHT, RIGHT_TO_LEFT, SEQ2SEQ = 0, 1, 2, 3


def unilm_mask(modes: Array, is_prefix: Array) -> Array:
  """[B, T, T] bool: each row's UniLM mask (Dong et al. 2019).

  Args:
    modes: [B] int, per row one of BIDIRECTIONAL (every token sees every
      token), LEFT_TO_RIGHT (t sees keys <= t), RIGHT_TO_LEFT (t sees keys
      >= t) or SEQ2SEQ (`prefix_lm_mask`: the prefix is the source).
    is_prefix: [B, T] bool, the SEQ2SEQ rows' source tokens.
  """
  b, t = is_prefix.shape
  causal = jnp.broadcast_to(causal_mask(t), (b, t, t))
  m = modes[:, None, None]
  return jnp.select(
      [m == BIDIRECTIONAL, m == LEFT_TO_RIGHT, m == RIGHT_TO_LEFT],
      [jnp.ones_like(causal), causal, jnp.swapaxes(causal, 1, 2)],
      prefix_lm_mask(is_prefix))



def combine_masks(*masks: Array | None) -> Array | None:
  """AND of the given [B|1, T, S] bool masks; None entries are skipped."""
  masks = [m for m in masks if m is not None]
  if not masks:
    return None
  out = masks[0].astype(bool)
  for m in masks[1:]:
    out = out & m.astype(bool)
  return out
