"""XLNet: two-stream relative attention over a post-LN transformer.

Yang et al. 2019, as Hugging Face's `XLNetLMHeadModel` runs it (attn_type
"bi"). Token embeddings (no absolute positions, no norm), L post-LN layers
(attention, MLP), an LM head tied to the token table plus a bias.

Attention scores of query i against key j sum three terms, all scaled by
1/sqrt(H):

    content   (q_i + u) . k_j                 u: content_bias
    position  (q_i + v) . W_r sin(d_ij)       v: position_bias
    segment   (q_i + s) . e[t_i != t_j]       s: segment_bias, e: segment_embed

d_ij is the distance from key to query (Transformer-XL's sinusoidal codes,
optionally clamped); the segment term is relative too (same token type or
not), and present only when `token_types` is given.

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
from typing import NamedTuple, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from zoo.models import bert
from zoo.models import blocks
from zoo.models import layers
from zoo.models import masks

Array = jax.Array
# Without perm_mask the content state at t has read x_t and what follows,
# so "decoder" callers (causal scoring, greedy generation, clm without a
# mask) would read the future. Encoder callers get what they expect:
# bidirectional states for heads and probes, MLM logits, and clm through
# its causal `mask`. `zoo.scoring` scores XLNet by its own query stream
# in the left-to-right factorisation order ("permutation_l2r").
INTERFACE = "encoder"


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


class Context(NamedTuple):
  """What every layer reads besides its streams (the same in each layer)."""
  codes: Array  # [R, D] float32 relative position codes
  rel_index: Array | None  # [B, T, S] int32 (positions given), else None
  types_differ: Array | None  # [B, T, S] bool; None = no segment term
  content_mask: Array  # [B, T, S] bool, True = may attend
  query_mask: Array  # [B, T, S] bool
  target_mapping: Array | None  # [B, K, T] float32; None = no query stream


# ---------------------------------------------------- positions and masks ---


def relative_codes(length: int, keys: int, features: int,
                   clamp_len: int = -1) -> Array:
  """float32 [R, D] sinusoidal codes of the distances S, S-1, ..., 1-T.

  Args:
    length: T queries.
    keys: S = M + T keys.
    features: D.
    clamp_len: distances clamped to [-clamp_len, clamp_len] when > 0.
  """
  distance = jnp.arange(keys, -length, -1, dtype=jnp.float32)
  if clamp_len > 0:
    distance = jnp.clip(distance, -clamp_len, clamp_len)
  return layers.sinusoidal(distance[None], features)[0]


def relative_index(positions: Array, num_mems: int) -> Array:
  """int32 [B, T, S]: column of `relative_codes` for each (query, key).

  The distance of key j from query i is pos_i - pos_j (mems sit just
  before the segment), clipped to the distances the codes cover.
  """
  b, t = positions.shape
  q = positions + num_mems
  mem_pos = jnp.broadcast_to(jnp.arange(num_mems, dtype=q.dtype),
                             (b, num_mems))
  k = jnp.concatenate([mem_pos, q], axis=1)
  keys = num_mems + t
  distance = jnp.clip(q[:, :, None] - k[:, None, :], 1 - t, keys)
  return (keys - distance).astype(jnp.int32)


def at_distance(scores: Array, rel_index: Array | None) -> Array:
  """[B, N, T, R] scores against `relative_codes` -> [B, N, T, S], each
  (query, key) pair's own distance.

  Without `rel_index` query i and key j are M + i - j apart (column
  T - i + j): Transformer-XL's shift, a reshape and a slice, no gather.
  """
  if rel_index is not None:
    return jnp.take_along_axis(scores, rel_index[:, None], axis=-1)
  b, n, t, r = scores.shape
  shifted = scores.reshape(b, n, r, t)[:, :, 1:].reshape(b, n, t, r - 1)
  return shifted[..., :r - t]


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
  b, t = segments.shape
  padding_query = (segments == 0)[:, :, None]
  query = masks.combine_masks(
      masks.segment_mask(segments) | (padding_query & (segments != 0)[:, None]),
      mask)
  if perm_mask is not None:
    query = query & ~(jnp.asarray(perm_mask) > 0)
  content = query | jnp.eye(t, dtype=bool)[None]
  mems = jnp.ones((b, t, num_mems), bool)
  return (jnp.concatenate([mems, content], axis=2),
          jnp.concatenate([mems, query], axis=2))


def types_differ(token_types: Array, num_mems: int) -> Array:
  """bool [B, T, S]: query and key have different token types (mems: 0)."""
  b = token_types.shape[0]
  keys = jnp.concatenate(
      [jnp.zeros((b, num_mems), token_types.dtype), token_types], axis=1)
  return token_types[:, :, None] != keys[:, None, :]


def cache_states(states: Sequence[Array], mems: Sequence[Array] | None,
                 mem_len: int, reuse_len: int) -> tuple[Array, ...]:
  """The next segment's mems: L x [B, M', D], gradient-stopped.

  Args:
    states: each layer's input, L x [B, T, D].
    mems: this call's mems, L x [B, M, D], or None.
    mem_len: keep the last this many; 0 = all.
    reuse_len: cache only the first this many of this call's; 0 = all.
  """
  out = []
  for i, x in enumerate(states):
    x = x[:, :reuse_len] if reuse_len > 0 else x
    if mems is not None:
      x = jnp.concatenate([mems[i], x], axis=1)
    x = x[:, -mem_len:] if mem_len > 0 else x
    out.append(jax.lax.stop_gradient(x))
  return tuple(out)


# ------------------------------------------------------------------ layers ---


class RelativeAttention(nn.Module):
  """Relative multi-head attention of both streams (shared weights).

  Params: query/key/value/position kernels [D, N, H] (`embed, heads, kv`),
  out [N, H, D], content_bias/position_bias/segment_bias [N, H],
  segment_embed [2, N, H] (same type, different type). No biases on the
  projections.

  Attributes:
    config: the model `Config`.
    deterministic: no attention dropout when True.
  """
  config: Config
  deterministic: bool = True

  def _proj(self, name: str) -> layers.Dense:
    c = self.config
    return layers.Dense((c.num_heads, c.head_dim), ("embed", "heads", "kv"),
                        use_bias=False, dtype=c.dtype, name=name)

  @nn.compact
  def __call__(self, h: Array, g: Array | None, mem: Array | None,
               ctx: Context) -> tuple[Array, Array | None]:
    """h [B, T, D], g [B, K, D] or None, mem [B, M, D] or None ->
    attention outputs (h's [B, T, D], g's [B, K, D] or None), float32."""
    c = self.config
    nh = (c.num_heads, c.head_dim)
    keys = h if mem is None else jnp.concatenate([mem, h], axis=1)
    k, v = self._proj("key")(keys), self._proj("value")(keys)
    k_r = self._proj("position")(ctx.codes)  # [R, N, H]
    per_head = lambda name, lead=(): layers.param_with_axes(
        self, name, layers.default_init, lead + nh,
        ("classes",) * len(lead) + ("heads", "kv"))
    biases = (per_head("content_bias"), per_head("position_bias"),
              per_head("segment_bias"), per_head("segment_embed", (2,)))
    core = lambda q, m: self._core(q, k, v, k_r, biases, m, ctx)
    query, out = self._proj("query"), layers.Dense(
        h.shape[-1], ("heads", "kv", "embed"), in_dims=2, use_bias=False,
        dtype=c.dtype, name="out")
    out_h = out(core(query(h), ctx.content_mask))
    if g is None:
      return out_h, None
    dtype = layers.compute_dtype(c.dtype)
    # Each prediction's query sits at its target's position (the
    # reference's scatter onto T rows and gather back).
    q_g = layers.einsum("bknh,bkt->btnh", query(g), ctx.target_mapping,
                        dtype)
    vec_g = layers.einsum("btnh,bkt->bknh", core(q_g, ctx.query_mask),
                          ctx.target_mapping, dtype)
    return out_h, out(vec_g)

  def _core(self, q, k, v, k_r, biases, mask, ctx):
    """q [B, T, N, H] at the T positions -> [B, T, N, H] float32."""
    c = self.config
    u, pos_bias, seg_bias, seg_embed = biases
    dtype = layers.compute_dtype(c.dtype)
    scale = c.head_dim ** -0.5
    bias = at_distance(layers.einsum("btnh,rnh->bntr", q + pos_bias, k_r,
                                     dtype), ctx.rel_index)
    if ctx.types_differ is not None:
      seg = layers.einsum("btnh,snh->bnts", q + seg_bias, seg_embed, dtype)
      bias = bias + jnp.where(ctx.types_differ[:, None], seg[..., 1:],
                              seg[..., :1])
    dropout = None
    if c.attention_dropout_rate > 0 and not self.deterministic:
      dropout = layers.Dropout(c.attention_dropout_rate, deterministic=False)
    return layers.attention(q + u, k, v, mask=mask, bias=bias * scale,
                            scale=scale, dtype=c.dtype,
                            impl=c.attention_impl, dropout=dropout)


class Layer(nn.Module):
  """One XLNet layer over both streams: attention, then the MLP, each
  followed by dropout, an optional adapter, the residual and a LayerNorm.

  Attributes:
    config: the model `Config`.
    deterministic: no dropout when True.
  """
  config: Config
  deterministic: bool = True

  @nn.compact
  def __call__(self, h: Array, g: Array | None, mem: Array | None,
               ctx: Context) -> tuple[Array, Array | None]:
    """h [B, T, D], g [B, K, D] or None -> the same, float32."""
    c = self.config
    det = self.deterministic
    drop = layers.Dropout(c.dropout_rate)
    mlp = layers.Mlp(c.mlp_dim, c.activation, dropout_rate=c.dropout_rate,
                     dtype=c.dtype, name="mlp")
    norms = [layers.LayerNorm(c.norm_eps, name=f"{n}_norm")
             for n in ("attention", "mlp")]
    adapters = [layers.Adapter(c.adapter_dim, c.dtype, name=f"adapter_{n}")
                if c.adapter_dim else None for n in ("attention", "mlp")]

    def sublayer(x, y, i):
      y = drop(y, deterministic=det)
      y = adapters[i](y) if adapters[i] is not None else y
      return norms[i](x + y)

    def rest(x, attended):
      x = sublayer(x, attended, 0)
      return sublayer(x, mlp(x, det), 1)

    attn_h, attn_g = RelativeAttention(c, det, name="attention")(h, g, mem,
                                                                  ctx)
    return rest(h, attn_h), None if g is None else rest(g, attn_g)


def layer_class(remat) -> type[nn.Module]:
  """`Layer`, recomputed in the backward pass as `remat` (blocks.REMAT)
  says."""
  name = blocks.remat_policy(remat)
  if name == "none":
    return Layer
  policy = (jax.checkpoint_policies.dots_with_no_batch_dims_saveable
            if name == "dots" else None)
  return nn.remat(Layer, policy=policy)


def _constrain(x: Array | None) -> Array | None:
  return None if x is None else nn.with_logical_constraint(
      x, blocks.ACTIVATION_AXES)


class _ScanBody(nn.Module):
  """Layer as a scan body: (h, g) carried, each layer's mem scanned."""
  config: Config
  deterministic: bool

  @nn.compact
  def __call__(self, carry, mem, ctx):
    h, g = layer_class(self.config.remat)(
        self.config, self.deterministic, name="block")(*carry, mem, ctx)
    carry = (_constrain(h), _constrain(g))
    return carry, carry


class Stack(nn.Module):
  """L layers, unrolled (`layer_<i>`) or as one scan (`layers/block`).

  Attributes:
    config: the model `Config`.
  """
  config: Config

  @nn.compact
  def __call__(self, h: Array, g: Array | None,
               mems: Sequence[Array] | None, ctx: Context,
               deterministic: bool = True):
    """-> (L content states [B, T, D], L query states [B, K, D] or Nones)."""
    c = self.config
    h, g = _constrain(h), _constrain(g)
    if c.scan_layers:
      stacked = None if mems is None else jnp.stack(mems)
      scan = nn.scan(
          _ScanBody, variable_axes={"params": 0},
          split_rngs={"params": True, "dropout": True},
          in_axes=(0, nn.broadcast), length=c.num_layers,
          metadata_params={nn.PARTITION_NAME: "layers"})
      _, (hs, gs) = scan(c, deterministic, name="layers")((h, g), stacked,
                                                           ctx)
      unstack = lambda x: tuple(x) if x is not None else (None,) * len(hs)
      return unstack(hs), unstack(gs)
    cls, hs, gs = layer_class(c.remat), [], []
    for i in range(c.num_layers):
      mem = None if mems is None else mems[i]
      h, g = cls(c, deterministic, name=f"layer_{i}")(h, g, mem, ctx)
      h, g = _constrain(h), _constrain(g)
      hs.append(h)
      gs.append(g)
    return tuple(hs), tuple(gs)


class LmHead(nn.Module):
  """Logits against the token table, plus a bias (`lm_loss` upstream)."""
  vocab_size: int

  @nn.compact
  def __call__(self, h: Array, embed: layers.Embed) -> Array:
    """h [B, T, D] -> [B, T, V] float32."""
    bias = layers.param_with_axes(self, "bias", nn.initializers.zeros,
                                  (self.vocab_size,), ("vocab",))
    return embed.attend(h) + bias


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
  if mems is None:
    return 0
  shapes = {tuple(m.shape) for m in mems}
  if len(mems) != config.num_layers or len(shapes) != 1 or (
      next(iter(shapes))[::2] != (b, config.embed_dim)):
    raise ValueError(f"mems must be {config.num_layers} arrays [B, M, D] "
                     f"with B = {b}, D = {config.embed_dim}, one M; got "
                     f"{len(mems)} of shapes {sorted(shapes)}")
  return next(iter(shapes))[1]


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
    self.encoder = Stack(c)
    self.lm_head = LmHead(c.vocab_size)

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
      gradient-stopped, see `cache_states`), "logits" [B, T, V] or
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
           "new_mems": cache_states((h,) + hs[:-1], mems, c.mem_len,
                                    c.reuse_len)}
    if g is not None:
      out["query_hidden"], out["query_layers"] = gs[-1], (g,) + gs
    if return_logits:
      last = out["query_hidden"] if g is not None else bert.gather_positions(
          out["hidden"], logits_at)
      out["logits"] = self.lm_head(
          self.dropout(last, deterministic=deterministic), self.token)
    return out

  def _context(self, tokens, segment_ids, token_types, positions, mask,
               perm_mask, target_mapping, num_mems, deterministic) -> Context:
    """The masks, codes and relations every layer reads."""
    c = self.config
    t = tokens.shape[1]
    segments = masks.real_segments(tokens, c.pad_id, segment_ids)
    content, query = attention_masks(segments, num_mems, mask, perm_mask)
    codes = self.dropout(
        relative_codes(t, num_mems + t, c.embed_dim, c.clamp_len),
        deterministic=deterministic)
    return Context(
        codes=codes,
        rel_index=(None if positions is None
                   else relative_index(positions, num_mems)),
        types_differ=(None if token_types is None
                      else types_differ(token_types, num_mems)),
        content_mask=content, query_mask=query,
        target_mapping=(None if target_mapping is None
                        else jnp.asarray(target_mapping, jnp.float32)))
