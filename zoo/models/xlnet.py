"""XLNet: two-stream relative attention over a post-LN transformer.

Yang et al. 2019, as Hugging Face's `XLNetLMHeadModel` runs it (attn_type
"bi"). Token embeddings (no absolute positions, no norm), L post-LN layers
(attention, MLP), an LM head tied to the token table plus a bias.

Attention is Transformer-XL's relative attention (`zoo.models.relative`:
content, position and segment terms) over distances both ways; the segment
term is relative too (same token type or not), and present only when
`token_types` is given.

Two streams share every weight. The content stream h starts at the token
embeddings, and query i always sees key i. The query stream g (only with
`target_mapping`) starts at the learned mask embedding: each of its K rows
sits at the position it predicts and sees the keys `perm_mask` allows, so
it knows where its token is but not what. `perm_mask[b, i, j] = 1` says i
may not attend to j (the reference's convention); permutation LM draws a
factorisation order and forbids every key that comes later in it. Without
`perm_mask` every token sees its whole document: the plain forward is a
bidirectional encoder with content-stream logits (as the reference's).

`mems` (Transformer-XL recurrence): each layer's input states of an
earlier segment, M of them, prepended to that layer's keys and values and
seen by every query. `new_mems` returns this call's, gradient-stopped.

Letters: B batch, T length, M mems, S = M + T keys, R = S + T relative
distances, K predictions, D embed, N heads, H head dim, F mlp, V vocab, L
layers.
"""

import dataclasses
from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from zoo.models import bert
from zoo.models import layers
from zoo.models import masks
from zoo.models import relative

Array = jax.Array
# Without perm_mask the content state at t has read x_t and what follows,
# so "decoder" callers (causal scoring, greedy generation, clm without a
# mask) would read the future. Encoder callers get what they expect:
# bidirectional states for heads and probes, MLM logits, and clm through
# its causal `mask`. `zoo.scoring` scores XLNet by its own query stream
# in the left-to-right factorisation order ("permutation_l2r").
INTERFACE = "encoder"
# A pair's A/B ids enter as relative segment encodings (any two ids).
TOKEN_TYPES = True


@dataclasses.dataclass(frozen=True)
class Config:
  """XLNet hyper-parameters (field names shared with the other families)."""
  vocab_size: int = 32000  # V
  pad_id: int = 0  # padding id; -1 = none (released checkpoints use 5)
  dtype: str = "float32"  # compute dtype of matmuls; params stay float32
  dropout_rate: float = 0.1  # embeddings, codes, sub-layers, MLP hidden
  attention_dropout_rate: float = 0.1  # on attention probabilities
  scan_layers: bool = False  # one nn.scan over the layers
  remat: str = "none"  # backward recomputation: blocks.REMAT (or a bool)
  adapter_dim: int = 0  # >0: bottleneck adapters in every layer
  num_layers: int = 12  # L
  embed_dim: int = 768  # D (even: the sinusoidal codes)
  num_heads: int = 12  # N
  head_dim: int = 64  # H
  mlp_dim: int = 3072  # F
  activation: str = "gelu"  # MLP activation
  norm_eps: float = 1e-12  # LayerNorm epsilon
  mem_len: int = 0  # new_mems keep the last mem_len states; 0 = all
  reuse_len: int = 0  # only a row's first reuse_len states are cached; 0 = all
  bi_data: bool = False  # the paper's forward+backward data: unsupported
  clamp_len: int = -1  # distances clamped to +-clamp_len; <= 0: no clamp
  attention_impl: str = "auto"  # see layers.attention

  def __post_init__(self):
    if self.bi_data:
      raise ValueError(
          "xlnet bi_data=True (half the batch read backwards, with its own "
          "relative codes) is not supported; use bi_data=False")
    if self.embed_dim % 2:
      raise ValueError(f"xlnet embed_dim {self.embed_dim} must be even "
                       "(sine and cosine halves of the relative codes)")


SIZES = {
    "tiny": dict(vocab_size=512, num_layers=2, embed_dim=64, num_heads=4,
                 head_dim=16, mlp_dim=128),
    "base": dict(),
    "large": dict(num_layers=24, embed_dim=1024, num_heads=16, head_dim=64,
                  mlp_dim=4096),
}


# ---------------------------------------------------------------- masks ---


def attention_masks(segments: Array, num_mems: int, mask: Array | None = None,
                    perm_mask: Array | None = None) -> tuple[Array, Array]:
  """`(content, query)` bool [B, T, S] masks, True = may attend.

  A query sees the keys of its own document (never padding) that `mask`
  allows and `perm_mask` does not forbid, and every mem. The content
  stream also always sees its own position; the query stream only where
  the rest allows it. A padding query reads every real key of its row, as
  in the reference (which masks padding keys only): no real state depends
  on it, but padding states enter `new_mems`, and a query that may see no
  key at all attends to every key evenly, padding included.

  Args:
    segments: [B, T] int document ids, 0 = padding.
    num_mems: M.
    mask: [B|1, T, T] bool extra mask, True = may attend.
    perm_mask: [B, T, T] (bool, int or float), > 0 = may not attend.
  """
  t = segments.shape[1]
  padding_query = (segments == 0)[:, :, None]
  query = masks.combine_masks(
      masks.segment_mask(segments) | (padding_query & (segments != 0)[:, None]),
      mask)
  if perm_mask is not None:
    query = query & ~(jnp.asarray(perm_mask) > 0)
  content = query | jnp.eye(t, dtype=bool)[None]
  return (relative.with_mems(content, num_mems),
          relative.with_mems(query, num_mems))


def types_differ(token_types: Array, num_mems: int) -> Array:
  """bool [B, T, S]: query and key have different token types (mems: 0)."""
  b = token_types.shape[0]
  keys = jnp.concatenate(
      [jnp.zeros((b, num_mems), token_types.dtype), token_types], axis=1)
  return token_types[:, :, None] != keys[:, None, :]


# ------------------------------------------------------------------- model ---


def _check_inputs(tokens, perm_mask, target_mapping, mems, logits_at,
                  config: Config) -> int:
  """Raises on inputs of the wrong shape; returns M."""
  b, t = tokens.shape
  if perm_mask is not None and perm_mask.shape != (b, t, t):
    raise ValueError(f"perm_mask {perm_mask.shape} must be [B, T, T] = "
                     f"{(b, t, t)}")
  if target_mapping is not None and (
      target_mapping.ndim != 3 or target_mapping.shape[::2] != (b, t)):
    raise ValueError(f"target_mapping {target_mapping.shape} must be "
                     f"[B, K, T] with B, T = {b, t}")
  if target_mapping is not None and logits_at is not None:
    raise ValueError("pass target_mapping (query-stream logits) or "
                     "logits_at (content-stream logits), not both")
  return relative.check_mems(mems, config, b)


class Model(nn.Module):
  """XLNet with its tied LM head.

  Attributes:
    config: a `Config`.
  """
  config: Config

  def setup(self):
    c = self.config
    self.token = layers.Embed(c.vocab_size, c.embed_dim, dtype=c.dtype)
    self.mask_embed = layers.param_with_axes(
        self, "mask_embed", layers.default_init, (c.embed_dim,), ("embed",))
    self.dropout = layers.Dropout(c.dropout_rate)
    self.encoder = relative.Stack(c, segments=True)
    self.lm_head = relative.LmHead(c.vocab_size)

  def __call__(self, tokens: Array, *, segment_ids: Array | None = None,
               token_types: Array | None = None,
               positions: Array | None = None, mask: Array | None = None,
               perm_mask: Array | None = None,
               target_mapping: Array | None = None,
               mems: Sequence[Array] | None = None,
               deterministic: bool = True, return_logits: bool = True,
               logits_at: Array | None = None) -> dict:
    """Runs both streams.

    Args:
      tokens: [B, T] int32.
      segment_ids: [B, T] int32, 0 = padding; attention stays within equal
        ids. None = (tokens != pad_id).
      token_types: [B, T] int32 segment A/B ids for the relative segment
        term (mems count as type 0); None = no segment term (the
        reference's token_type_ids=None, which differs from zeros).
      positions: [B, T] int32; distances become pos_i - pos_j, clipped to
        the codes' 1-T .. M+T (positions restarting per document give the
        same states as None). None = arange(T), the reference's.
      mask: [B|1, T, T] bool, True = may attend, AND-ed in.
      perm_mask: [B, T, T], 1 = i may not attend to j (the reference's).
      target_mapping: [B, K, T] one-hot rows: the K positions the query
        stream predicts; "logits" then come from it, [B, K, V].
      mems: L x [B, M, D] float32, an earlier call's "new_mems".
      deterministic: no dropout when True.
      return_logits: compute "logits".
      logits_at: [B, K] int32 positions: content-stream logits there only.

    Returns:
      "hidden" [B, T, D] (content stream), "layers" L+1 x [B, T, D]
      (embeddings first), "new_mems" L x [B, M', D] (each layer's input,
      gradient-stopped, see `relative.cache_states`), "logits" [B, T, V] or
      [B, K, V] (if return_logits), and with target_mapping
      "query_hidden" [B, K, D] and "query_layers" L+1 x [B, K, D]; all
      float32.
    """
    c = self.config
    m = _check_inputs(tokens, perm_mask, target_mapping, mems, logits_at, c)
    ctx = self._context(tokens, segment_ids, token_types, positions, mask,
                        perm_mask, target_mapping, m, deterministic)
    h = self.dropout(self.token(tokens), deterministic=deterministic)
    g = None
    if target_mapping is not None:
      shape = target_mapping.shape[:2] + (c.embed_dim,)
      g = self.dropout(jnp.broadcast_to(self.mask_embed, shape),
                       deterministic=deterministic)
    hs, gs = self.encoder(h, g, mems, ctx, deterministic)
    out = {"hidden": hs[-1], "layers": (h,) + hs,
           "new_mems": relative.cache_states((h,) + hs[:-1], mems,
                                             c.mem_len, c.reuse_len)}
    if g is not None:
      out["query_hidden"], out["query_layers"] = gs[-1], (g,) + gs
    if return_logits:
      last = out["query_hidden"] if g is not None else bert.gather_positions(
          out["hidden"], logits_at)
      out["logits"] = self.lm_head(
          self.dropout(last, deterministic=deterministic), self.token)
    return out

  def _context(self, tokens, segment_ids, token_types, positions, mask,
               perm_mask, target_mapping, num_mems,
               deterministic) -> relative.Context:
    """The masks, codes and relations every layer reads."""
    c = self.config
    t = tokens.shape[1]
    segments = masks.real_segments(tokens, c.pad_id, segment_ids)
    content, query = attention_masks(segments, num_mems, mask, perm_mask)
    codes = self.dropout(
        relative.relative_codes(t, num_mems + t, c.embed_dim, c.clamp_len),
        deterministic=deterministic)
    return relative.Context(
        codes=codes,
        rel_index=(None if positions is None else relative.relative_index(
            positions, num_mems, codes.shape[0])),
        types_differ=(None if token_types is None
                      else types_differ(token_types, num_mems)),
        content_mask=content, query_mask=query,
        target_mapping=(None if target_mapping is None
                        else jnp.asarray(target_mapping, jnp.float32)))
