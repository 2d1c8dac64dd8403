"""Longformer: RoBERTa with sliding-window and global attention.

Beltagy et al. 2020, as Hugging Face's `LongformerModel` and
`LongformerForMaskedLM` run it: RoBERTa's embeddings (positions offset by
`position_offset`), L post-LN layers, a pooler and RoBERTa's tied MLM head
(whose transform is always exact gelu, as the reference's).

Each layer's attention costs O(T * W), never T x T. A token that is not
global reads
  - its window: keys j with |i - j| <= W * R and (i - j) divisible by R,
    where W = attention_window // 2 (the reference's one-sided window) and
    R = attention_dilation (the paper's dilation; the reference has R = 1);
  - every global token of its document (through the same projections).
A global token (`global_mask`) reads every key of its document through the
separate `query_global`, `key_global`, `value_global` projections, and its
output replaces the windowed one: global attention is symmetric, as in the
paper. Keys never cross documents (`segment_ids`) and never are padding.

The window is computed in blocks: positions split into R residue classes
(dilation), each class into U blocks of C = W positions, and each block's
queries score the keys of itself and its two neighbours ([U, C, 3C] scores,
the band mask applied inside). A class no longer than W is one block
scoring itself. Any T works: the blocks are padded, as the reference pads
to a multiple of its window (the padding is never read). Global tokens are
gathered into G = `max_global` slots per row (the first G of a row; more
stay local), so their rows and columns cost O(T * G).

Letters: B batch, T length, D embed, N heads, H head dim, F mlp, V vocab,
L layers; W one-sided window, R dilation, U blocks per class, C block
length, S keys per block (3C, or C with one block), G global slots.
"""

import dataclasses
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from zoo.models import bert
from zoo.models import blocks
from zoo.models import layers
from zoo.models import masks

Array = jax.Array
INTERFACE = "encoder"
_MASK_VALUE = -1e9  # as layers': a query with no key stays finite


@dataclasses.dataclass(frozen=True)
class Config:
  """Longformer hyper-parameters (field names shared with BERT's)."""
  vocab_size: int = 50265  # V
  pad_id: int = 0  # padding token id
  dtype: str = "float32"  # compute dtype of matmuls; params stay float32
  dropout_rate: float = 0.1  # on embeddings and every sub-layer output
  attention_dropout_rate: float = 0.1  # on attention probabilities
  scan_layers: bool = False  # one nn.scan over the layers
  remat: str = "none"  # backward recomputation: blocks.REMAT (or a bool)
  adapter_dim: int = 0  # >0: bottleneck adapters in every layer
  num_layers: int = 12  # L
  embed_dim: int = 768  # D
  num_heads: int = 12  # N
  mlp_dim: int = 3072  # F
  max_len: int = 4098  # rows of the position table
  position_offset: int = 2  # added to positions (the reference: pad_id + 1)
  position_init: str = "normal"  # "normal" or "sinusoidal"
  type_vocab_size: int = 1  # token types (the released models have one)
  activation: str = "gelu"  # MLP activation (the MLM head's is exact gelu)
  norm_eps: float = 1e-5  # LayerNorm epsilon
  pooler: bool = True  # tanh dense on the first token -> "pooled"
  attention_window: int = 512  # 2W: W keys on each side (even, > 0)
  attention_dilation: int = 1  # R: the window reads every R-th key
  max_global: int = 128  # G: global tokens per row read as global

  def __post_init__(self):
    if self.embed_dim % self.num_heads:
      raise ValueError(f"longformer embed_dim {self.embed_dim} is not "
                       f"divisible by num_heads {self.num_heads}")
    if self.attention_window <= 0 or self.attention_window % 2:
      raise ValueError(
          f"longformer attention_window {self.attention_window} must be a "
          "positive even number: a token reads attention_window / 2 keys "
          "on each side (the reference's convention)")
    if self.attention_dilation < 1:
      raise ValueError(f"longformer attention_dilation "
                       f"{self.attention_dilation} must be >= 1")
    if self.max_global < 1:
      raise ValueError(f"longformer max_global {self.max_global} must be "
                       ">= 1")


SIZES = {
    "tiny": dict(vocab_size=512, num_layers=2, embed_dim=64, num_heads=4,
                 mlp_dim=128, max_len=258, attention_window=16, max_global=8),
    # The released longformer-base-4096 and -large-4096 (window 512).
    "base": dict(),
    "large": dict(num_layers=24, embed_dim=1024, num_heads=16, mlp_dim=4096),
}


# --------------------------------------------------------------- context ---


class Context(NamedTuple):
  """What every layer's attention reads (the same in each layer)."""
  segments: Array  # [B, T] int document ids, 0 = padding
  local_keys: Array  # [B, T] bool: keys the window reads (not global ones)
  slots: Array | None = None  # [B, G] int positions of the global tokens
  slot_ok: Array | None = None  # [B, G] bool, False on filler slots


def global_slots(global_mask: Array, segments: Array, max_global: int):
  """The first `max_global` global tokens of each row.

  Args:
    global_mask: [B, T] bool (or 0/1), True = global attention.
    segments: [B, T] int, 0 = padding (never global).
    max_global: G (at most T slots are made).

  Returns:
    (is_global [B, T] bool, slots [B, G'] int32 positions in order,
    slot_ok [B, G'] bool), G' = min(G, T); filler slots are not ok.
  """
  wanted = global_mask.astype(bool) & (segments != 0)
  g = min(max_global, segments.shape[1])
  is_global = wanted & (jnp.cumsum(wanted, axis=1) <= g)
  slots = jnp.argsort(~is_global, axis=1, stable=True)[:, :g]
  slots = slots.astype(jnp.int32)
  return is_global, slots, jnp.take_along_axis(is_global, slots, axis=1)


def make_context(tokens: Array, config: Config, segment_ids: Array | None,
                 global_mask: Array | None) -> Context:
  """The `Context` of a call (see `Model.__call__` for the arguments)."""
  segments = masks.real_segments(tokens, config.pad_id, segment_ids)
  if global_mask is None:
    return Context(segments, jnp.ones(segments.shape, bool))
  if global_mask.shape != tokens.shape:
    raise ValueError(f"global_mask {global_mask.shape} must be [B, T] = "
                     f"{tokens.shape}")
  if not any(isinstance(a, jax.core.Tracer) for a in (global_mask, segments)):
    real = np.asarray(global_mask, bool) & (np.asarray(segments) != 0)
    most = int(real.sum(axis=1).max(initial=0))
    if most > config.max_global:
      raise ValueError(f"a row has {most} global tokens; this longformer "
                       f"reads at most max_global={config.max_global}")
  is_global, slots, ok = global_slots(global_mask, segments,
                                      config.max_global)
  return Context(segments, ~is_global, slots, ok)


# ------------------------------------------------------ windowed attention ---


def _geometry(length: int, radius: int, dilation: int):
  """(positions per class, U, C) of a length: blocks of C = W, or one."""
  per_class = -(-length // dilation)
  if per_class <= radius:
    return per_class, 1, per_class
  num = -(-per_class // radius)
  return num * radius, num, radius


def _to_blocks(x: Array, dilation: int, num: int, size: int) -> Array:
  """x [B, R*U*C, ...] -> [B*R, U, C, ...]: residue classes, then blocks."""
  b, rest = x.shape[0], x.shape[2:]
  x = jnp.moveaxis(x.reshape((b, num * size, dilation) + rest), 2, 1)
  return x.reshape((b * dilation, num, size) + rest)


def _from_blocks(x: Array, dilation: int) -> Array:
  """Inverse of `_to_blocks`: [B*R, U, C, ...] -> [B, R*U*C, ...]."""
  br, num, size = x.shape[:3]
  rest = x.shape[3:]
  x = x.reshape((br // dilation, dilation, num * size) + rest)
  return jnp.moveaxis(x, 1, 2).reshape((br // dilation, -1) + rest)


def _neighbours(x: Array) -> Array:
  """Block keys [B, U, C, ...] -> [B, U, S, ...]: each block with the one
  before and after it (zeros beyond the ends), or alone when U = 1."""
  if x.shape[1] == 1:
    return x
  p = jnp.pad(x, [(0, 0), (1, 1)] + [(0, 0)] * (x.ndim - 2))
  return jnp.concatenate([p[:, :-2], p[:, 1:-1], p[:, 2:]], axis=2)


def _band(num: int, size: int, radius: int) -> np.ndarray:
  """bool [1, C, S]: key slot s is within `radius` of query c (the same in
  every block: slot s of block u's keys is position (u - 1) * C + s)."""
  shift, keys = (size, 3 * size) if num > 1 else (0, size)
  distance = np.arange(size)[:, None] + shift - np.arange(keys)[None]
  return (np.abs(distance) <= radius)[None]


def window_attention(q: Array, k: Array, v: Array, segments: Array,
                     local_keys: Array, *, radius: int, dilation: int = 1,
                     extra: tuple[Array, Array, Array] | None = None,
                     dropout=None, dtype: str = "float32") -> Array:
  """Sliding-window attention in blocks, plus extra keys (global tokens).

  Args:
    q: [B, T, N, H] queries, already scaled.
    k, v: [B, T, N, H] keys and values.
    segments: [B, T] int, 0 = padding; keys of the query's document only.
    local_keys: [B, T] bool, keys the window may read.
    radius: W; the window is |i - j| <= W * R with (i - j) divisible by R.
    dilation: R.
    extra: (keys [B, G, N, H], values [B, G, N, H], allowed [B, T, G]
      bool): keys every query reads where allowed, besides its window.
    dropout: applied to the attention probabilities, or None.
    dtype: compute dtype name.

  Returns:
    [B, T, N, H] float32.
  """
  t = q.shape[1]
  per_class, num, size = _geometry(t, radius, dilation)
  pad = lambda x: jnp.pad(x, [(0, 0), (0, per_class * dilation - t)]
                          + [(0, 0)] * (x.ndim - 2))
  blocked = lambda x: _to_blocks(pad(x), dilation, num, size)
  cdtype = layers.compute_dtype(dtype)
  q_b = blocked(q)  # [B*R, U, C, N, H]
  k_b, v_b = _neighbours(blocked(k)), _neighbours(blocked(v))
  seg_q = blocked(segments)
  seg_k = _neighbours(blocked(jnp.where(local_keys, segments, 0)))
  ok = ((seg_q[..., None] == seg_k[:, :, None]) & (seg_k != 0)[:, :, None]
        & _band(num, size, radius))  # [B*R, U, C, S]
  logits = jnp.where(ok[:, :, :, None],
                     layers.einsum("bucnh,busnh->bucns", q_b, k_b, cdtype),
                     _MASK_VALUE)
  g = 0
  if extra is not None:
    k_x, v_x = (jnp.repeat(x, dilation, axis=0) for x in extra[:2])
    g = k_x.shape[1]
    x_logits = layers.einsum("bucnh,bgnh->bucng", q_b, k_x, cdtype)
    logits = jnp.concatenate([jnp.where(
        blocked(extra[2])[:, :, :, None], x_logits, _MASK_VALUE), logits], -1)
  probs = jax.nn.softmax(logits, axis=-1)
  probs = probs if dropout is None else dropout(probs)
  out = layers.einsum("bucns,busnh->bucnh", probs[..., g:], v_b, cdtype)
  if extra is not None:
    out = out + layers.einsum("bucng,bgnh->bucnh", probs[..., :g], v_x,
                              cdtype)
  return _from_blocks(out, dilation)[:, :t]


def global_attention(q: Array, k: Array, v: Array, q_segments: Array,
                     segments: Array, *, dropout=None,
                     dtype: str = "float32") -> Array:
  """Global tokens read every key of their document.

  Args:
    q: [B, G, N, H] queries of the global slots, already scaled.
    k, v: [B, T, N, H] (the global projections).
    q_segments: [B, G] int, each slot's document.
    segments: [B, T] int, 0 = padding.
    dropout: on the probabilities, or None.
    dtype: compute dtype name.

  Returns:
    [B, G, N, H] float32.
  """
  mask = ((q_segments[:, :, None] == segments[:, None, :])
          & (segments != 0)[:, None, :])
  return layers.attention(q, k, v, mask=mask, scale=1.0, dtype=dtype,
                          impl="einsum", dropout=dropout)


# ----------------------------------------------------------------- layers ---

# The global twins of query, key and value (the reference's names).
GLOBAL_PROJECTIONS = ("query_global", "key_global", "value_global")


class Attention(nn.Module):
  """Windowed and global self-attention of one layer.

  Params: query, key, value and their `_global` twins [D, N, H] (`embed,
  heads, kv`), out [N, H, D]; all with biases.

  Attributes:
    config: a `Config`.
    deterministic: no dropout when True.
  """
  config: Config
  deterministic: bool = True

  def _proj(self, name: str) -> nn.Module:
    c = self.config
    return layers.Dense((c.num_heads, c.embed_dim // c.num_heads),
                        ("embed", "heads", "kv"), dtype=c.dtype, name=name)

  @nn.compact
  def __call__(self, x: Array, ctx: Context) -> Array:
    """x [B, T, D] -> [B, T, D] float32."""
    c = self.config
    scale = (c.embed_dim // c.num_heads) ** -0.5
    q = self._proj("query")(x) * scale
    k, v = self._proj("key")(x), self._proj("value")(x)
    dropout = None
    if c.attention_dropout_rate > 0 and not self.deterministic:
      dropout = layers.Dropout(c.attention_dropout_rate, deterministic=False)
    extra = None
    if ctx.slots is not None:
      at = ctx.slots[:, :, None, None]
      seg_g = jnp.take_along_axis(ctx.segments, ctx.slots, axis=1)
      allowed = ((ctx.segments[:, :, None] == seg_g[:, None, :])
                 & ctx.slot_ok[:, None, :])
      extra = (jnp.take_along_axis(k, at, axis=1),
               jnp.take_along_axis(v, at, axis=1), allowed)
    out = window_attention(
        q, k, v, ctx.segments, ctx.local_keys, radius=c.attention_window // 2,
        dilation=c.attention_dilation, extra=extra, dropout=dropout,
        dtype=c.dtype)
    out = self._with_global(x, out, ctx, scale, dropout)
    return layers.Dense(x.shape[-1], ("heads", "kv", "embed"), in_dims=2,
                        dtype=c.dtype, name="out")(out)

  def _with_global(self, x, out, ctx, scale, dropout):
    """out [B, T, N, H] with the global tokens' rows replaced."""
    if ctx.slots is None:
      if self.is_initializing():  # the params exist with or without them
        for name in GLOBAL_PROJECTIONS:
          self._proj(name)(x[:, :1])
      return out
    q_proj, k_proj, v_proj = (self._proj(name) for name in GLOBAL_PROJECTIONS)
    x_g = jnp.take_along_axis(x, ctx.slots[:, :, None], axis=1)
    seg_g = jnp.take_along_axis(ctx.segments, ctx.slots, axis=1)
    out_g = global_attention(q_proj(x_g) * scale, k_proj(x), v_proj(x),
                             seg_g, ctx.segments, dropout=dropout,
                             dtype=self.config.dtype)
    rows = jnp.arange(x.shape[0])[:, None]
    at = jnp.where(ctx.slot_ok, ctx.slots, x.shape[1])  # filler: dropped
    return out.at[rows, at].set(out_g, mode="drop")


class Layer(nn.Module):
  """One post-LN layer: attention, then the MLP, each followed by dropout,
  an optional adapter, the residual and a LayerNorm (as `blocks.Block`).

  Attributes:
    config: a `Config`.
    deterministic: no dropout when True.
  """
  config: Config
  deterministic: bool = True

  @nn.compact
  def __call__(self, x: Array, ctx: Context) -> Array:
    """x [B, T, D] -> [B, T, D] float32."""
    c = self.config
    drop = layers.Dropout(c.dropout_rate)

    def sublayer(x, y, name):
      y = drop(y, deterministic=self.deterministic)
      if c.adapter_dim:
        y = layers.Adapter(c.adapter_dim, c.dtype, name=f"adapter_{name}")(y)
      return layers.LayerNorm(c.norm_eps, name=f"{name}_norm")(x + y)

    x = sublayer(x, Attention(c, self.deterministic, name="attention")(
        x, ctx), "attention")
    mlp = layers.Mlp(c.mlp_dim, c.activation, dtype=c.dtype, name="mlp")
    return sublayer(x, mlp(x, self.deterministic), "mlp")


# ------------------------------------------------------------------ model ---


class Model(nn.Module):
  """Longformer encoder with pooler and tied MLM head.

  Attributes:
    config: a `Config`.
  """
  config: Config

  def setup(self):
    c = self.config
    self.embeddings = bert.Embeddings(
        c.vocab_size, c.embed_dim, c.max_len, c.type_vocab_size, c.norm_eps,
        c.dropout_rate, c.dtype, c.position_init)
    self.encoder = blocks.LayerStack(Layer, c)
    if c.pooler:
      self.pooler = layers.Dense(c.embed_dim, ("embed", "embed_out"),
                                 dtype=c.dtype)
    self.mlm = bert.MlmHead(c.embed_dim, "gelu", c.norm_eps, c.dtype)

  def __call__(self, tokens: Array, *, segment_ids: Array | None = None,
               token_types: Array | None = None,
               positions: Array | None = None, mask: Array | None = None,
               global_mask: Array | None = None, deterministic: bool = True,
               return_logits: bool = True,
               logits_at: Array | None = None) -> dict[str, Array]:
    """Encodes tokens.

    Args:
      tokens: [B, T] int32, any T.
      segment_ids: [B, T] int32, 0 = padding; attention stays within equal
        ids. None = (tokens != pad_id).
      token_types: [B, T] int32; None = zeros.
      positions: [B, T] int32; None = arange(T). The position table is
        read at positions + position_offset.
      mask: refused: a dense [B, T, T] mask is what this model avoids.
      global_mask: [B, T] bool, True = global attention (the first
        `max_global` of a row; padding never). None = none.
      deterministic: no dropout when True.
      return_logits: compute the MLM logits.
      logits_at: [B, K] int32 positions: "logits" there only, [B, K, V].

    Returns:
      "hidden" [B, T, D], "layers" L+1 x [B, T, D] (embeddings first),
      "logits" [B, T, V] or [B, K, V] (if return_logits), "pooled" [B, D]
      (if the config has a pooler); all float32.
    """
    c = self.config
    if mask is not None:
      raise ValueError(
          "longformer takes no dense [B, T, T] mask (its attention is the "
          "window, global_mask and segment_ids, in O(T * window))")
    if positions is None and tokens.shape[1] + c.position_offset > c.max_len:
      raise ValueError(
          f"longformer reads positions up to {tokens.shape[1] - 1} + offset "
          f"{c.position_offset}, beyond its table of max_len={c.max_len}")
    ctx = make_context(tokens, c, segment_ids, global_mask)
    pos = layers.arange_positions(tokens, positions) + c.position_offset
    x = self.embeddings(tokens, pos, token_types, deterministic)
    hs = self.encoder(x, ctx, deterministic=deterministic)
    h = hs[-1]
    out = {"hidden": h, "layers": (x,) + hs}
    if return_logits:
      out["logits"] = self.mlm(bert.gather_positions(h, logits_at),
                               self.embeddings)
    if c.pooler:
      out["pooled"] = jnp.tanh(self.pooler(h[:, 0]))
    return out
