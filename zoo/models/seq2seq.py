"""Masks and defaults shared by the encoder-decoder families (T5, BART).

Segment ids follow the batch contract: 0 = padding, equal non-zero ids =
one packed document. In packed mode a decoder token attends (across) only
to encoder tokens of its own document.

Letters: B batch, T decoder (query) length, S encoder (key) length.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from zoo.models import layers
from zoo.models import masks

Array = jax.Array


def decoder_mask(length: int, segment_ids: Array | None = None,
                 mask: Array | None = None) -> Array:
  """bool [B|1,T,T]: causal AND same document (when given) AND mask."""
  seg = None if segment_ids is None else layers.segment_mask(segment_ids)
  return layers.combine_masks(layers.causal_mask(length), seg, mask)


def cross_mask(enc_segment_ids: Array, dec_segment_ids: Array | None,
               length: int) -> Array:
  """bool [B,T,S]: non-padding encoder keys, of the query's document.

  Args:
    enc_segment_ids: int [B,S], 0 = padding.
    dec_segment_ids: int [B,T] or None (every query sees every real key).
    length: T.
  """
  if dec_segment_ids is None:
    return layers.key_padding_mask(enc_segment_ids, length)
  return layers.segment_mask(dec_segment_ids, enc_segment_ids)


def decoder_inputs(dec_tokens: Array, encoder_hidden: Array,
                   enc_segment_ids: Array | None,
                   dec_segment_ids: Array | None,
                   dec_positions: Array | None,
                   dec_mask: Array | None) -> tuple[Array, Array, Array]:
  """`(positions [B,T], self mask [B|1,T,T], cross mask [B,T,S])` of a decode.

  Args:
    dec_tokens: int [B,T]. encoder_hidden: float [B,S,D].
    enc_segment_ids: int [B,S], 0 = padding; None = no padding.
    dec_segment_ids, dec_positions, dec_mask: as in the families' `decode`.
  """
  if enc_segment_ids is None:
    enc_segment_ids = jnp.ones(encoder_hidden.shape[:2], jnp.int32)
  t = dec_tokens.shape[1]
  return (layers.arange_positions(dec_tokens, dec_positions),
          decoder_mask(t, dec_segment_ids, dec_mask),
          cross_mask(enc_segment_ids, dec_segment_ids, t))


class EncoderDecoder(nn.Module):
  """The faces every encoder-decoder family shares: `encdec` (teacher
  forcing), `encode` and `decode` (over given encoder states).

  A family subclasses it with a `config` field and defines `encoder` and
  `decoder` stacks, called as `stack(x [B,*,D], positions, self mask,
  [encoder states, cross mask,] deterministic=)` and returning `(h,
  layers)`, plus `_embed(tokens) -> [B,*,D]` and `lm_logits(h) -> [B,T,V]`
  (the LM head, which scoring also calls on chosen decoder states).
  """

  def encdec(self, enc_tokens: Array, dec_tokens: Array, *,
             enc_segment_ids: Array | None = None,
             dec_segment_ids: Array | None = None,
             enc_positions: Array | None = None,
             dec_positions: Array | None = None,
             dec_mask: Array | None = None,
             deterministic: bool = True,
             return_logits: bool = True) -> dict[str, Array]:
    """Encodes, then decodes with teacher forcing.

    Args:
      enc_tokens: int32 [B,S].
      dec_tokens: int32 [B,T], targets shifted right (starting with the
        family's decoder start id).
      enc_segment_ids: int32 [B,S], 0 = padding; None = (enc != pad_id).
      dec_segment_ids: int32 [B,T] or None (no decoder padding, one doc).
      enc_positions, dec_positions: int32 [B,S], [B,T]; None = arange.
      dec_mask: bool [B,T,T] extra decoder self-attention mask.
      deterministic: no dropout when True.
      return_logits: compute "logits" with the LM head.

    Returns:
      "logits" [B,T,V] (if return_logits), "hidden" [B,T,D], "layers" L+1
      x [B,T,D] (decoder), "encoder_hidden" [B,S,D], "encoder_layers" L+1
      x [B,S,D]; float32.
    """
    enc = self.encode(enc_tokens, enc_segment_ids=enc_segment_ids,
                      enc_positions=enc_positions, deterministic=deterministic)
    enc_seg = masks.real_segments(enc_tokens, self.config.pad_id,
                               enc_segment_ids)
    out = self.decode(dec_tokens, enc["encoder_hidden"],
                      enc_segment_ids=enc_seg, dec_segment_ids=dec_segment_ids,
                      dec_positions=dec_positions, dec_mask=dec_mask,
                      deterministic=deterministic,
                      return_logits=return_logits)
    return dict(out, **enc)

  def encode(self, enc_tokens: Array, *, enc_segment_ids: Array | None = None,
             enc_positions: Array | None = None, mask: Array | None = None,
             deterministic: bool = True) -> dict[str, Array]:
    """enc_tokens int32 [B,S] -> "encoder_hidden" [B,S,D], "encoder_layers".

    `mask` is an extra bool [B,S,S] self-attention mask.
    """
    seg = masks.real_segments(enc_tokens, self.config.pad_id, enc_segment_ids)
    pos = layers.arange_positions(enc_tokens, enc_positions)
    h, hs = self.encoder(self._embed(enc_tokens), pos,
                         masks.document_mask(seg, mask), deterministic=deterministic)
    return {"encoder_hidden": h, "encoder_layers": hs}

  def decode(self, dec_tokens: Array, encoder_hidden: Array, *,
             enc_segment_ids: Array | None = None,
             dec_segment_ids: Array | None = None,
             dec_positions: Array | None = None,
             dec_mask: Array | None = None,
             deterministic: bool = True,
             return_logits: bool = True) -> dict[str, Array]:
    """Decoder pass over given encoder states.

    Args:
      dec_tokens: int32 [B,T].
      encoder_hidden: float [B,S,D].
      enc_segment_ids: int32 [B,S], 0 = padding; None = no padding.
      dec_segment_ids, dec_positions, dec_mask, return_logits: as in
        `encdec`.
      deterministic: no dropout when True.

    Returns:
      "logits" [B,T,V] (if return_logits), "hidden" [B,T,D], "layers" L+1
      x [B,T,D].
    """
    pos, self_mask, cross = decoder_inputs(
        dec_tokens, encoder_hidden, enc_segment_ids, dec_segment_ids,
        dec_positions, dec_mask)
    h, hs = self.decoder(self._embed(dec_tokens), pos, self_mask,
                         encoder_hidden, cross, deterministic=deterministic)
    out = {"hidden": h, "layers": hs}
    if return_logits:
      out["logits"] = self.lm_logits(h)
    return out
