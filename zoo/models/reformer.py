"""Reformer: a causal LM of reversible layers, LSH and local attention.

Kitaev et al. 2020, as Hugging Face's `ReformerModelWithLMHead` runs it.
Token embeddings plus position embeddings (axial, `zoo.models.axial`, or
a plain [max_len, D] table), then L
reversible layers (`zoo.models.reversible`) on two streams that both
start at the embeddings:

    y1 = x1 + Attention(x2)    (LayerNorm, local or LSH attention, dense)
    y2 = x2 + FeedForward(y1)  (LayerNorm, dense, dropout, act, dense),

the layer kinds cycling through `attn_layers` (e.g. local, LSH, local,
...; `zoo.models.lsh`). The two final streams are concatenated, normed
([B, T, 2D]) and projected to the vocabulary by an untied dense layer.
The feed-forward runs over chunks of `ff_chunk` positions when asked
(each chunk recomputed in the backward pass), so its [B, T, F] hidden
never exists at once.

Training keeps one layer's activations, whatever L: the backward pass
recomputes each layer's inputs from its outputs (`reversible=True`).

LSH rotations are random: drawn from the "hash" rng when given, else in
training (`deterministic=False`) from the "dropout" rng (the step's), else
from `hash_seed` (evaluation: the same buckets every call); or passed as
`rotations`. Each layer draws its own; every recomputation draws the same.

Params: `token`, `position` (`axis_<i>` or `embedding`), `encoder` with
`layer_<u>` per unit (one period of `attn_layers`: `<kind>_<j>` layers,
each with `attention` and `feed_forward`) or, scanned, `layers/block`
stacked on a leading `layers` axis, `final_norm` (2D), `head`.

Letters: B batch, T length, D embed, N heads, H head dim, F mlp, V vocab,
L layers, U units, P layers a unit, R hash rounds.
"""

import dataclasses
import functools
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from zoo.models import axial
from zoo.models import bert
from zoo.models import blocks
from zoo.models import layers
from zoo.models import lsh
from zoo.models import masks
from zoo.models import reversible

Array = jax.Array
INTERFACE = "decoder"
KINDS = ("local", "lsh")
_HASH_STREAM = 0x4A5  # folds the dropout rng into the training rotations


def _tuple(value):
  return tuple(value) if isinstance(value, (list, tuple)) else value


@dataclasses.dataclass(frozen=True)
class Config:
  """Reformer hyper-parameters (defaults: the released crime-and-punishment
  model)."""
  vocab_size: int = 320  # V
  pad_id: int = 0  # padding id; -1 = none (every token is real)
  dtype: str = "float32"  # compute dtype of matmuls; params stay float32
  dropout_rate: float = 0.05  # embeddings, sub-layer outputs, MLP hidden,
                              # the final norm's output
  attention_dropout_rate: float = 0.05  # local attention probabilities
  lsh_dropout_rate: float = 0.0  # LSH attention probabilities
  scan_layers: bool = False  # one scan over the units (periods of attn_layers)
  reversible: bool = True  # recompute activations from outputs in backward
  adapter_dim: int = 0  # >0: bottleneck adapters on f's and g's outputs
  num_layers: int = 6  # L, a multiple of len(attn_layers)
  embed_dim: int = 256  # D
  num_heads: int = 2  # N
  head_dim: int = 64  # H (need not be D / N)
  mlp_dim: int = 512  # F
  activation: str = "relu"  # MLP activation (layers.ACTIVATIONS)
  norm_eps: float = 1e-12  # LayerNorm epsilon
  attn_layers: tuple[str, ...] = ("local", "lsh")  # kinds, cycled over L
  local_chunk: int = 64  # C of local attention
  local_before: int = 1  # preceding chunks a local chunk reads
  lsh_chunk: int = 64  # C of LSH attention (over the sorted order)
  lsh_before: int = 1  # preceding sorted chunks an LSH chunk reads
  num_buckets: int | tuple[int, ...] = (64, 128)  # even, or even factors
  num_hashes: int = 1  # R hash rounds
  hash_seed: int = 0  # rotations when no rng gives them (evaluation)
  max_len: int = 524288  # positions
  axial_shape: tuple[int, ...] = (512, 1024)  # () = a [max_len, D] table
  axial_dims: tuple[int, ...] = (64, 192)  # D split over the axial tables
  ff_chunk: int = 0  # >0: the MLP runs over chunks of this many positions

  def __post_init__(self):
    for name in ("attn_layers", "num_buckets", "axial_shape", "axial_dims"):
      object.__setattr__(self, name, _tuple(getattr(self, name)))
    _check_layers(self)
    _check_attention(self)
    if self.axial_shape:
      axial.check(self.axial_shape, self.axial_dims, self.embed_dim,
                  self.max_len)

  @property
  def period(self) -> int:
    """P: layers a unit."""
    return len(self.attn_layers)

  @property
  def units(self) -> int:
    """U: repetitions of `attn_layers`."""
    return self.num_layers // self.period


def _check_layers(c: Config) -> None:
  bad = [k for k in c.attn_layers if k not in KINDS]
  if not c.attn_layers or bad:
    raise ValueError(f"reformer attn_layers {c.attn_layers} must be a "
                     f"non-empty sequence of {KINDS}")
  if c.num_layers < 1 or c.num_layers % c.period:
    raise ValueError(f"reformer num_layers {c.num_layers} is not a positive "
                     f"multiple of len(attn_layers) = {c.period} (the layer "
                     "kinds cycle through attn_layers)")
  if c.ff_chunk < 0:
    raise ValueError(f"reformer ff_chunk {c.ff_chunk} must be >= 0")
  if c.activation not in layers.ACTIVATIONS:  # no gated MLP here
    raise ValueError(f"reformer activation {c.activation!r} is not one of "
                     f"{sorted(layers.ACTIVATIONS)}")


def _check_attention(c: Config) -> None:
  factors = lsh.bucket_factors(c.num_buckets)
  if not factors or any(not isinstance(f, int) or f < 2 or f % 2
                        for f in factors):
    raise ValueError(f"reformer num_buckets {c.num_buckets} must be an even "
                     "int >= 2 or a sequence of them (angular LSH splits "
                     "each rotation into +/- halves)")
  if min(c.local_chunk, c.lsh_chunk) < 1 or min(c.local_before,
                                                c.lsh_before) < 0:
    raise ValueError("reformer chunk lengths must be >= 1 and chunks "
                     f"before >= 0; got local {c.local_chunk}/"
                     f"{c.local_before}, lsh {c.lsh_chunk}/{c.lsh_before}")
  if c.num_hashes < 1:
    raise ValueError(f"reformer num_hashes {c.num_hashes} must be >= 1")


SIZES = {
    "tiny": dict(vocab_size=512, num_layers=2, embed_dim=64, num_heads=2,
                 head_dim=32, mlp_dim=128, local_chunk=8, lsh_chunk=8,
                 num_buckets=8, num_hashes=2, max_len=128,
                 axial_shape=(8, 16), axial_dims=(16, 48)),
    # The released google/reformer-crime-and-punishment.
    "small": dict(),
    # The released google/reformer-enwik8 (character level, 64k context).
    "base": dict(vocab_size=258, num_layers=12, embed_dim=1024, num_heads=8,
                 head_dim=128, mlp_dim=4096, dropout_rate=0.2,
                 attention_dropout_rate=0.2, lsh_dropout_rate=0.1,
                 attn_layers=("local", "local", "lsh", "local"),
                 local_chunk=128, lsh_chunk=256, num_buckets=512,
                 num_hashes=4, max_len=65536, axial_shape=(128, 512),
                 axial_dims=(256, 768)),
}


def chunk_lengths(c: Config) -> tuple[int, ...]:
  """The chunk lengths of the layer kinds present."""
  return tuple(sorted({c.local_chunk if k == "local" else c.lsh_chunk
                       for k in c.attn_layers}))


def rotation_shape(c: Config) -> tuple[int, int, int, int]:
  """[N, H, R, K/2] of one LSH layer's rotations."""
  return lsh.rotation_shape(c.num_heads, c.head_dim, c.num_hashes,
                            c.num_buckets)


def _constrain(x: Array) -> Array:
  return nn.with_logical_constraint(x, blocks.ACTIVATION_AXES)


def _adapted(c: Config, y: Array) -> Array:
  """A sub-layer's output [B, T, D], through an adapter if configured."""
  if c.adapter_dim:
    y = layers.Adapter(c.adapter_dim, c.dtype, name="adapter")(y)
  return _constrain(y)


class Context(NamedTuple):
  """What every layer's attention reads (the same in each layer)."""
  segments: Array  # [B, T] int documents, 0 = padding
  rotations: Array | None = None  # [N, H, R, K/2] for every LSH layer


# ----------------------------------------------------------------- layers ---


class AttentionBlock(nn.Module):
  """f of a reversible layer: LayerNorm, local or LSH attention, out
  projection, dropout. Params: `norm`; `query`, `key`, `value` (local) or
  `query_key`, `value` (LSH) [D, N, H]; `out` [N, H, D]; no biases;
  `adapter` when `adapter_dim`.

  Attributes:
    config: a `Config`.
    kind: "local" or "lsh".
  """
  config: Config
  kind: str

  def _proj(self, name: str) -> nn.Module:
    c = self.config
    return layers.Dense((c.num_heads, c.head_dim), ("embed", "heads", "kv"),
                        use_bias=False, dtype=c.dtype, name=name)

  def _dropout(self, rate: float, deterministic: bool):
    if rate > 0 and not deterministic:
      return layers.Dropout(rate, deterministic=False)
    return None

  @nn.compact
  def __call__(self, x: Array, ctx: Context,
               deterministic: bool = True) -> Array:
    """x [B, T, D] -> [B, T, D] float32."""
    c = self.config
    h = layers.LayerNorm(c.norm_eps, name="norm")(x)
    out = self._lsh(h, ctx, deterministic) if self.kind == "lsh" else (
        self._local(h, ctx, deterministic))
    out = layers.Dense(x.shape[-1], ("heads", "kv", "embed"), in_dims=2,
                       use_bias=False, dtype=c.dtype, name="out")(out)
    return _adapted(c, layers.Dropout(c.dropout_rate)(out, deterministic))

  def _local(self, h, ctx, deterministic):
    c = self.config
    q, k, v = (self._proj(n)(h) for n in ("query", "key", "value"))
    return lsh.local_attention(
        q, k, v, ctx.segments, chunk=c.local_chunk, before=c.local_before,
        dropout=self._dropout(c.attention_dropout_rate, deterministic),
        dtype=c.dtype)

  def _lsh(self, h, ctx, deterministic):
    c = self.config
    qk, v = self._proj("query_key")(h), self._proj("value")(h)
    rotations = ctx.rotations
    if rotations is None and h.shape[1] > c.lsh_chunk:
      rotations = lsh.random_rotations(self.make_rng("hash"),
                                       rotation_shape(c))
    return lsh.lsh_attention(
        qk, v, ctx.segments, rotations, chunk=c.lsh_chunk,
        before=c.lsh_before, num_buckets=c.num_buckets,
        dropout=self._dropout(c.lsh_dropout_rate, deterministic),
        dtype=c.dtype)


class _Mlp(nn.Module):
  """dense, dropout, activation, dense, dropout (the reference's order);
  a scan body: (carry, x [B, C, D]) -> (carry, [B, C, D])."""
  config: Config
  deterministic: bool

  @nn.compact
  def __call__(self, carry, x: Array):
    c = self.config
    drop = layers.Dropout(c.dropout_rate, deterministic=self.deterministic)
    h = layers.Dense(c.mlp_dim, ("embed", "mlp"), dtype=c.dtype,
                     name="wi")(x)
    h = layers.activation_fn(c.activation)(drop(h))
    return carry, drop(layers.Dense(x.shape[-1], ("mlp", "embed"),
                                    dtype=c.dtype, name="wo")(h))


class FeedForward(nn.Module):
  """g of a reversible layer: LayerNorm, then the MLP (`mlp/wi` [D, F],
  `mlp/wo` [F, D], with biases), over chunks of `ff_chunk` positions;
  `adapter` when `adapter_dim`.

  Attributes:
    config: a `Config`.
  """
  config: Config

  @nn.compact
  def __call__(self, x: Array, ctx: Context | None = None,
               deterministic: bool = True) -> Array:
    """x [B, T, D] -> [B, T, D] float32 (ctx unused)."""
    del ctx
    c = self.config
    h = layers.LayerNorm(c.norm_eps, name="norm")(x)
    b, t, d = x.shape
    if not c.ff_chunk or t <= c.ff_chunk:
      return _adapted(c, _Mlp(c, deterministic, name="mlp")(None, h)[1])
    n = -(-t // c.ff_chunk)
    h = jnp.pad(h, [(0, 0), (0, n * c.ff_chunk - t), (0, 0)])
    scan = nn.scan(nn.remat(_Mlp), variable_broadcast="params",
                   split_rngs={"params": False, "dropout": True},
                   in_axes=1, out_axes=1, length=n)
    _, y = scan(c, deterministic, name="mlp")(
        None, h.reshape(b, n, c.ff_chunk, d))
    return _adapted(c, y.reshape(b, n * c.ff_chunk, d)[:, :t])


def _apply(module: nn.Module, deterministic: bool, params, x, ctx, key):
  """A sub-layer as a pure function (`reversible.RevLayer`'s f and g)."""
  rngs = {} if key is None else dict(key)
  return module.apply({"params": params}, x, ctx, deterministic, rngs=rngs)


def rev_layers(c: Config, deterministic: bool):
  """The `reversible.RevLayer`s of one unit."""
  out = []
  for j, kind in enumerate(c.attn_layers):
    f = functools.partial(_apply, AttentionBlock(c, kind), deterministic)
    g = functools.partial(_apply, FeedForward(c), deterministic)
    out.append(reversible.RevLayer(f"{kind}_{j}", f, g))
  return tuple(out)


class _Layer(nn.Module):
  """One reversible layer as modules: only `init` runs it (to make the
  params); the forward is `reversible.stack` over them."""
  config: Config
  kind: str

  @nn.compact
  def __call__(self, x1, x2, ctx):
    y1 = x1 + AttentionBlock(self.config, self.kind, name="attention")(
        x2, ctx)
    return y1, x2 + FeedForward(self.config, name="feed_forward")(y1)


class _Unit(nn.Module):
  """One period of `attn_layers`, as modules (init only); a scan body."""
  config: Config

  @nn.compact
  def __call__(self, carry, ctx):
    for j, kind in enumerate(self.config.attn_layers):
      carry = _Layer(self.config, kind, name=f"{kind}_{j}")(*carry, ctx)
    return carry, None


class _ScanUnit(nn.Module):
  config: Config

  @nn.compact
  def __call__(self, carry, ctx):
    return _Unit(self.config, name="block")(carry, ctx)


# ---------------------------------------------------------------- encoder ---


class Encoder(nn.Module):
  """The L reversible layers.

  Attributes:
    config: a `Config`.
  """
  config: Config

  @nn.compact
  def __call__(self, x: Array, ctx: Context, deterministic: bool = True):
    """x [B, T, D] -> (y1, y2 [B, T, D], hs [L, B, T, D]) float32."""
    c = self.config
    if self.is_initializing():
      self._make_params(x, ctx)
    params = nn.meta.unbox(self.variables["params"])
    params = (params["layers"]["block"] if c.scan_layers else
              [params[f"layer_{u}"] for u in range(c.units)])
    return reversible.stack(
        rev_layers(c, deterministic), params, _constrain(x), ctx,
        self._keys(deterministic), scanned=c.scan_layers,
        reversible=c.reversible)

  def _make_params(self, x, ctx):
    c = self.config
    if ctx.rotations is None:
      ctx = ctx._replace(rotations=lsh.random_rotations(
          jax.random.key(c.hash_seed), rotation_shape(c)))
    if c.scan_layers:
      nn.scan(_ScanUnit, variable_axes={"params": 0},
              split_rngs={"params": True}, in_axes=(nn.broadcast,),
              length=c.units, metadata_params={nn.PARTITION_NAME: "layers"})(
                  c, name="layers")((x, x), ctx)
      return
    for u in range(c.units):
      _Unit(c, name=f"layer_{u}")((x, x), ctx)

  def _keys(self, deterministic: bool) -> dict[str, Array]:
    """Per-unit keys [U]: "hash" always, "dropout" in training."""
    c = self.config
    if self.has_rng("hash"):
      hash_key = self.make_rng("hash")
    elif not deterministic and self.has_rng("dropout"):
      hash_key = jax.random.fold_in(self.make_rng("dropout"), _HASH_STREAM)
    else:
      hash_key = jax.random.key(c.hash_seed)
    keys = {"hash": jax.random.split(hash_key, c.units)}
    if not deterministic and self.has_rng("dropout"):
      keys["dropout"] = jax.random.split(self.make_rng("dropout"), c.units)
    return keys


# ------------------------------------------------------------------ model ---


class Model(nn.Module):
  """Reformer causal LM.

  Attributes:
    config: a `Config`.
  """
  config: Config

  def setup(self):
    c = self.config
    self.token = layers.Embed(c.vocab_size, c.embed_dim, dtype=c.dtype)
    self.position = (
        axial.AxialPositions(c.axial_shape, c.axial_dims) if c.axial_shape else
        layers.Embed(c.max_len, c.embed_dim, axes=("positions", "embed")))
    self.dropout = layers.Dropout(c.dropout_rate)
    self.encoder = Encoder(c)
    self.final_norm = layers.LayerNorm(c.norm_eps)
    self.head = layers.Dense(c.vocab_size, ("embed", "vocab"), dtype=c.dtype)

  def __call__(self, tokens: Array, *, segment_ids: Array | None = None,
               positions: Array | None = None, mask: Array | None = None,
               prefix: Array | None = None, rotations: Array | None = None,
               deterministic: bool = True, return_logits: bool = True,
               logits_at: Array | None = None) -> dict[str, Array]:
    """Runs the causal LM.

    Rows longer than the shortest chunk length are padded to a multiple of
    the chunk lengths' least common multiple (as the reference does) and
    cut back after.

    Args:
      tokens: [B, T] int32, any T.
      segment_ids: [B, T] int32, 0 = padding; attention stays within equal
        ids. None = (tokens != pad_id).
      positions: [B, T] int32 into the position tables; None = arange.
      mask, prefix: refused (attention is causal, by chunks).
      rotations: [N, H, R, K/2] float (`rotation_shape`), the rotations of
        every LSH layer; None = drawn (see the module docstring).
      deterministic: no dropout when True.
      return_logits: compute the LM logits.
      logits_at: [B, K] int32 positions: logits there only ([B, K, V]).

    Returns:
      "hidden" [B, T, 2D] (both streams, normed), "layers" L+1 x
      [B, T, D] (embeddings, then each layer's y2 stream), "logits"
      [B, T, V] or [B, K, V] (if return_logits); all float32.
    """
    c = self.config
    _check_call(c, tokens, mask, prefix, rotations, positions)
    t = tokens.shape[1]
    full = lsh.padded_length(t, chunk_lengths(c))
    pad = lambda a, v: jnp.pad(a, [(0, 0), (0, full - t)], constant_values=v)
    segments = pad(masks.real_segments(tokens, c.pad_id, segment_ids), 0)
    tokens = pad(tokens, max(c.pad_id, 0))
    pos = masks.arange_positions(
        tokens, None if positions is None else pad(positions, 0))
    x = (self.dropout(self.token(tokens), deterministic)
         + self.dropout(self.position(pos), deterministic))
    y1, y2, hs = self.encoder(x, Context(segments, rotations), deterministic)
    h = self.final_norm(jnp.concatenate([y1, y2], axis=-1))
    h = self.dropout(h, deterministic)[:, :t]
    out = {"hidden": h,
           "layers": (x[:, :t],) + tuple(hs[i][:, :t] for i in range(len(hs)))}
    if return_logits:
      out["logits"] = self.head(bert.gather_positions(h, logits_at))
    return out


def _check_call(c: Config, tokens, mask, prefix, rotations, positions):
  """Refuses what the model does not take (with the reason)."""
  if mask is not None or prefix is not None:
    raise ValueError(
        "reformer takes no dense mask or prefix: its attention is causal, "
        "by chunks (segment_ids keep documents apart)")
  if rotations is not None and tuple(rotations.shape) != rotation_shape(c):
    raise ValueError(f"rotations {tuple(rotations.shape)} must be "
                     f"[N, H, R, K/2] = {rotation_shape(c)}")
  full = lsh.padded_length(tokens.shape[1], chunk_lengths(c))
  if positions is None and full > c.max_len:
    raise ValueError(
        f"reformer reads positions up to {full - 1} (rows of "
        f"{tokens.shape[1]} padded to the chunks), beyond max_len="
        f"{c.max_len}")
