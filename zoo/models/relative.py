"""Transformer-XL's relative attention and segment memory, shared by the
families built on it (`transfo_xl`, `xlnet`).

Dai et al. 2019. Attention scores of query i against key j sum these
terms, all scaled by 1/sqrt(H):

    content   (q_i + u) . k_j                 u: content_bias
    position  (q_i + v) . W_r sin(d_ij)       v: position_bias
    segment   (q_i + s) . e[t_i != t_j]       s: segment_bias, e: segment_embed

d_ij is the distance from key j to query i, coded by sinusoids
(`relative_codes`, optionally clamped). The segment term is XLNet's
(`segments=True`), present only when the `Context` carries token types.

Keys are [mems; segment]: each layer's mems are its input states of earlier
segments (`cache_states`, gradient-stopped), M of them just before the
segment, so query i is M + i - j from key j. Layers are post-LN (attention,
then the MLP; each followed by dropout, an optional adapter, the residual
and a LayerNorm), as the Transformer-XL release and XLNet run them.

XLNet's second (query) stream shares every weight: `g` rows sit at the
positions `target_mapping` names and see the keys `query_mask` allows.

`config` below is a family's `Config` with the fields num_layers,
num_heads, head_dim, mlp_dim, activation, norm_eps, dropout_rate,
attention_dropout_rate, attention_impl, adapter_dim, remat, scan_layers
and dtype.

Letters: B batch, T length, M mems, S = M + T keys, R relative distances
(S + T both ways, S + 1 causal), K predictions, D embed, N heads, H head
dim, V vocab, L layers.
"""

from typing import Any, NamedTuple, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from zoo.models import blocks
from zoo.models import layers

Array = jax.Array


class Context(NamedTuple):
  """What every layer reads besides its streams (the same in each layer)."""
  codes: Array  # [R, D] float32 relative position codes
  rel_index: Array | None  # [B, T, S] int32 (positions given), else None
  content_mask: Array  # [B, T, S] bool, True = may attend
  types_differ: Array | None = None  # [B, T, S] bool; None = no segment term
  query_mask: Array | None = None  # [B, T, S] bool (query stream)
  target_mapping: Array | None = None  # [B, K, T] float32; None = no g


# ------------------------------------------------ positions and memory ---


def relative_codes(length: int, keys: int, features: int,
                   clamp_len: int = -1, causal: bool = False) -> Array:
  """float32 [R, D] sinusoidal codes of the distances S, S-1, ..., low.

  Args:
    length: T queries.
    keys: S = M + T keys.
    features: D.
    clamp_len: distances clamped to [-clamp_len, clamp_len] when > 0.
    causal: low = 0 (R = S + 1: no query sees a later key); else low =
      1 - T (R = S + T).
  """
  low = 0 if causal else 1 - length
  distance = jnp.arange(keys, low - 1, -1, dtype=jnp.float32)
  if clamp_len > 0:
    distance = jnp.clip(distance, -clamp_len, clamp_len)
  # The same on every row: left to itself, the partitioner split R over a
  # data-parallel mesh and gathered it back in every layer.
  return nn.with_logical_constraint(
      layers.sinusoidal(distance[None], features)[0], ("positions", None))


def relative_index(positions: Array, num_mems: int, num_codes: int) -> Array:
  """int32 [B, T, S]: column of `relative_codes` for each (query, key).

  The distance of key j from query i is pos_i - pos_j (mems sit just
  before the segment, at 0 .. M-1), clipped to the R = `num_codes`
  distances the codes cover (S down to S + 1 - R).
  """
  b, t = positions.shape
  q = positions + num_mems
  mem_pos = jnp.broadcast_to(jnp.arange(num_mems, dtype=q.dtype),
                             (b, num_mems))
  k = jnp.concatenate([mem_pos, q], axis=1)
  keys = num_mems + t
  distance = jnp.clip(q[:, :, None] - k[:, None, :], keys + 1 - num_codes,
                      keys)
  return (keys - distance).astype(jnp.int32)


def at_distance(scores: Array, rel_index: Array | None, keys: int) -> Array:
  """[B, N, T, R] scores against `relative_codes` -> [B, N, T, S], each
  (query, key) pair's own distance.

  Without `rel_index` query i and key j are M + i - j apart (column
  T - i + j): Transformer-XL's shift, a reshape and a slice, no gather.
  With causal codes (R = S + 1) the columns of keys after the query run
  past R and read another row's scores: the causal mask hides them.
  """
  if rel_index is not None:
    return jnp.take_along_axis(scores, rel_index[:, None], axis=-1)
  b, n, t, r = scores.shape
  shifted = scores.reshape(b, n, r, t)[:, :, 1:].reshape(b, n, t, r - 1)
  return shifted[..., :keys]


def with_mems(mask: Array, num_mems: int,
              mem_mask: Array | None = None) -> Array:
  """[B, T, T] bool self-attention mask -> [B, T, M + T]: every query also
  sees every mem, or those `mem_mask` [B, T, M] (True = may attend) allows."""
  b, t = mask.shape[:2]
  mems = (jnp.ones((b, t, num_mems), bool) if mem_mask is None
          else jnp.broadcast_to(mem_mask, (b, t, num_mems)))
  return jnp.concatenate([mems, mask], axis=2)


def check_mems(mems: Sequence[Array] | None, config, batch: int) -> int:
  """M of `mems` (0 for None); raises unless they are L arrays [B, M, D]
  with one M."""
  if mems is None:
    return 0
  shapes = {tuple(m.shape) for m in mems}
  if len(mems) != config.num_layers or len(shapes) != 1 or (
      next(iter(shapes))[::2] != (batch, config.embed_dim)):
    raise ValueError(f"mems must be {config.num_layers} arrays [B, M, D] "
                     f"with B = {batch}, D = {config.embed_dim}, one M; got "
                     f"{len(mems)} of shapes {sorted(shapes)}")
  return next(iter(shapes))[1]


def cache_states(states: Sequence[Array], mems: Sequence[Array] | None,
                 mem_len: int, reuse_len: int = 0) -> tuple[Array, ...]:
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
  """Relative multi-head attention of one or both streams (shared weights).

  Params: query/key/value/position kernels [D, N, H] (`embed, heads, kv`),
  out [N, H, D], content_bias/position_bias [N, H], and with `segments`
  segment_bias [N, H] and segment_embed [2, N, H] (same type, different
  type). No biases on the projections.

  Attributes:
    config: the family's `Config`.
    segments: XLNet's relative segment term (its params exist even when a
      call passes no token types).
    deterministic: no attention dropout when True.
  """
  config: Any
  segments: bool = False
  deterministic: bool = True

  def _proj(self, name: str) -> layers.Dense:
    c = self.config
    return layers.Dense((c.num_heads, c.head_dim), ("embed", "heads", "kv"),
                        use_bias=False, dtype=c.dtype, name=name)

  def _per_head(self, name: str, lead: tuple[int, ...] = ()) -> Array:
    c = self.config
    return layers.param_with_axes(
        self, name, layers.default_init, lead + (c.num_heads, c.head_dim),
        ("classes",) * len(lead) + ("heads", "kv"))

  @nn.compact
  def __call__(self, h: Array, g: Array | None, mem: Array | None,
               ctx: Context) -> tuple[Array, Array | None]:
    """h [B, T, D], g [B, K, D] or None, mem [B, M, D] or None ->
    attention outputs (h's [B, T, D], g's [B, K, D] or None), float32."""
    c = self.config
    keys = h if mem is None else jnp.concatenate([mem, h], axis=1)
    k, v = self._proj("key")(keys), self._proj("value")(keys)
    k_r = self._proj("position")(ctx.codes)  # [R, N, H]
    biases = (self._per_head("content_bias"), self._per_head("position_bias"))
    if self.segments:
      biases += (self._per_head("segment_bias"),
                 self._per_head("segment_embed", (2,)))
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
    u, pos_bias = biases[:2]
    dtype = layers.compute_dtype(c.dtype)
    scale = c.head_dim ** -0.5
    bias = at_distance(layers.einsum("btnh,rnh->bntr", q + pos_bias, k_r,
                                     dtype), ctx.rel_index, k.shape[1])
    if ctx.types_differ is not None:
      seg_bias, seg_embed = biases[2:]
      seg = layers.einsum("btnh,snh->bnts", q + seg_bias, seg_embed, dtype)
      bias = bias + jnp.where(ctx.types_differ[:, None], seg[..., 1:],
                              seg[..., :1])
    dropout = None
    if c.attention_dropout_rate > 0 and not self.deterministic:
      dropout = layers.Dropout(c.attention_dropout_rate,
                               deterministic=False).keyed()
    return layers.attention(q + u, k, v, mask=mask, bias=bias * scale,
                            scale=scale, dtype=c.dtype,
                            impl=c.attention_impl, dropout=dropout)


class Layer(nn.Module):
  """One post-LN layer over both streams: attention, then the MLP, each
  followed by dropout, an optional adapter, the residual and a LayerNorm.

  Attributes:
    config: the family's `Config`.
    segments: see `RelativeAttention`.
    deterministic: no dropout when True.
  """
  config: Any
  segments: bool = False
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

    attn_h, attn_g = RelativeAttention(c, self.segments, det,
                                       name="attention")(h, g, mem, ctx)
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
  config: Any
  segments: bool
  deterministic: bool

  @nn.compact
  def __call__(self, carry, mem, ctx):
    h, g = layer_class(self.config.remat)(
        self.config, self.segments, self.deterministic, name="block")(
            *carry, mem, ctx)
    carry = (_constrain(h), _constrain(g))
    return carry, carry


class Stack(nn.Module):
  """L layers, unrolled (`layer_<i>`) or as one scan (`layers/block`).

  Attributes:
    config: the family's `Config`.
    segments: see `RelativeAttention`.
  """
  config: Any
  segments: bool = False

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
      _, (hs, gs) = scan(c, self.segments, deterministic, name="layers")(
          (h, g), stacked, ctx)
      unstack = lambda x: tuple(x) if x is not None else (None,) * len(hs)
      return unstack(hs), unstack(gs)
    cls, hs, gs = layer_class(c.remat), [], []
    for i in range(c.num_layers):
      mem = None if mems is None else mems[i]
      h, g = cls(c, self.segments, deterministic, name=f"layer_{i}")(
          h, g, mem, ctx)
      h, g = _constrain(h), _constrain(g)
      hs.append(h)
      gs.append(g)
    return tuple(hs), tuple(gs)


class LmHead(nn.Module):
  """Logits against the token table, plus a bias."""
  vocab_size: int

  @nn.compact
  def __call__(self, h: Array, embed: layers.Embed) -> Array:
    """h [B, T, D] -> [B, T, V] float32."""
    bias = layers.param_with_axes(self, "bias", nn.initializers.zeros,
                                  (self.vocab_size,), ("vocab",))
    return embed.attend(h) + bias
