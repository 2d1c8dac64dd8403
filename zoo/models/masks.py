"""Attention masks: boolean, True where query t may attend to key s.

Shapes [B, T, S]; a leading 1 broadcasts over the batch. Every kind the
zoo needs (padding, packed documents, causal, prefix-LM / UniLM
sequence-to-sequence, arbitrary) is one of these or their AND
(`combine_masks`). `zoo.models.layers` re-exports them all.
"""

import jax
import jax.numpy as jnp

Array = jax.Array


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


def prefix_lm_mask(prefix_lengths: Array, length: int) -> Array:
  """Prefix-LM mask: bidirectional over the prefix, causal after it.

  This is also UniLM's sequence-to-sequence mask: source tokens see the
  whole source, target tokens see the source and the target to their left.

  Args:
    prefix_lengths: [B] int, the length of each row's prefix (source).
    length: T.

  Returns:
    [B, T, T] bool.
  """
  idx = jnp.arange(length)
  in_prefix = idx[None, None, :] < prefix_lengths[:, None, None]
  return in_prefix | (idx[None, None, :] <= idx[None, :, None])


seq2seq_mask = prefix_lm_mask


def combine_masks(*masks: Array | None) -> Array | None:
  """AND of the given [B|1, T, S] bool masks; None entries are skipped."""
  masks = [m for m in masks if m is not None]
  if not masks:
    return None
  out = masks[0].astype(bool)
  for m in masks[1:]:
    out = out & m.astype(bool)
  return out
