"""Building blocks of every transformer family in the zoo.

Einsum letters used in shapes throughout `zoo.models`:

  B batch, T query length, S key length, D embed, N heads, H head dim,
  F mlp, V vocab, L layers.

Params are float32 and carry logical axis names (`vocab`, `embed`, `heads`,
`kv`, `mlp`, `layers`, `positions`, `relpos_buckets`). The compute dtype is a
name ("float32" or "bfloat16"): in bfloat16 mode every matmul takes bfloat16
inputs and accumulates in float32 (`preferred_element_type`), while softmax,
norms and losses stay float32. Activations between matmuls are float32.

Masks are boolean, True where a query may attend to a key, shaped [B, T, S]
(a leading 1 broadcasts over the batch). Their builders live in
`zoo.models.masks` and are re-exported here beside `attention`.

The transformer stacks live in `zoo.models.blocks`.
"""

from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

# Re-exported so that `layers` is the one place attention is built from.
from zoo.models.masks import (  # pylint: disable=unused-import
    arange_positions, causal_mask, combine_masks, key_padding_mask,
    prefix_lm_mask, segment_mask)
# Every model's dropout: a counter-hash mask, far cheaper than threefry.
from zoo.models.dropout import Dropout  # pylint: disable=unused-import
from zoo.models.barrier import grad_barrier
# Position codes and T5's relative buckets (pure functions).
from zoo.models.positions import (  # pylint: disable=unused-import
    relative_position_bucket, sinusoidal)
# The dense layer, initializers and compute dtypes every module builds on.
from zoo.models.dense import (  # pylint: disable=unused-import
    Dense, Initializer, compute_dtype, default_init, einsum, fan_in_init,
    matmul_precision, param_with_axes, project, unembed)
from zoo.models import cpu_attention
from zoo.models import masks as masks_lib
from zoo.models import splash

Array = jax.Array

# Finite stand-in for -inf: a fully masked row (a padding query) then gets a
# uniform, finite distribution instead of NaN.
_MASK_VALUE = -1e9

# ------------------------------------------------------------ embeddings ---


class Embed(nn.Module):
  """A lookup table; `attend` gives tied output logits.

  Attributes:
    num: rows (V for tokens, max positions, token types).
    features: D.
    axes: logical names of the table, e.g. ("vocab", "embed").
    dtype: compute dtype name (for `attend`).
  """
  num: int
  features: int
  axes: tuple[str, str] = ("vocab", "embed")
  dtype: str = "float32"
  embedding_init: Initializer = default_init

  def setup(self):
    self.embedding = param_with_axes(self, "embedding", self.embedding_init,
                                     (self.num, self.features), self.axes)

  def __call__(self, ids: Array) -> Array:
    """ids [B, T] int -> [B, T, D] float32."""
    if not jnp.issubdtype(ids.dtype, jnp.integer):
      raise ValueError(f"embedding ids must be integers, got {ids.dtype}")
    return jnp.take(self.embedding, ids, axis=0)

  def attend(self, x: Array) -> Array:
    """x [..., D] -> logits [..., V] float32 against the table (`unembed`)."""
    return unembed(x, self.embedding, self.dtype)


def position_init(kind: str) -> Initializer:
  """The init of a learned position table [P, D]: "normal" (N(0, 0.02)),
  or "sinusoidal" (the sine/cosine codes of each row, scaled to the same
  per-entry RMS, so positions are distinct and relative offsets linear in
  them from the first step)."""
  if kind == "normal":
    return default_init
  if kind != "sinusoidal":
    raise ValueError(f"unknown position init {kind!r}; use 'normal' or "
                     "'sinusoidal'")

  def init(key, shape, dtype=jnp.float32):
    del key
    codes = sinusoidal(jnp.arange(shape[0])[None], shape[1])[0]
    return (0.02 * np.sqrt(2.0) * codes).astype(dtype)
  return init


class RelativePositionBias(nn.Module):
  """T5 relative position bias, added to attention logits (`bias=`).

  Attributes:
    num_heads: N.
    num_buckets: buckets of `relative_position_bucket`.
    max_distance: see `relative_position_bucket`.
    bidirectional: True for encoders, False for causal decoders.
    embedding_init: initializer of the [buckets, N] table.
  """
  num_heads: int
  num_buckets: int = 32
  max_distance: int = 128
  bidirectional: bool = True
  embedding_init: Initializer = default_init

  @nn.compact
  def __call__(self, q_positions: Array, k_positions: Array) -> Array:
    """q_positions [B, T], k_positions [B, S] int -> bias [B, N, T, S] f32
    (B = 1 for positions shared by the batch)."""
    table = param_with_axes(self, "rel_embedding", self.embedding_init,
                            (self.num_buckets, self.num_heads),
                            ("relpos_buckets", "heads"))
    relative = k_positions[:, None, :] - q_positions[:, :, None]
    buckets = relative_position_bucket(
        relative, bidirectional=self.bidirectional,
        num_buckets=self.num_buckets, max_distance=self.max_distance)
    return jnp.take(table, buckets, axis=0).transpose(0, 3, 1, 2)


# ------------------------------------------------------------- attention ---


def _logits(q, k, bias, scale, dtype):
  logits = einsum("btnh,bsnh->bnts", q * scale, k, dtype)
  if bias is not None:
    logits = logits + bias.astype(jnp.float32)
  return logits


def _dense_mask(mask):
  """A mask argument of `attention` as a dense [B|1, N|1, T, S] bool or None,
  and the `masks.Segmented` it came from (or None)."""
  segmented = mask if isinstance(mask, masks_lib.Segmented) else None
  mask = segmented.dense if segmented is not None else mask
  if mask is not None and mask.ndim == 3:
    mask = mask[:, None]
  return mask, segmented


def attention_scores(q: Array, k: Array, *, mask=None,
                     bias: Array | None = None, scale: float | None = None,
                     dtype: str = "float32") -> Array:
  """Pre-softmax attention logits, what attention distillation compares.

  Args:
    q, k, mask, bias, scale, dtype: as in `attention`.

  Returns:
    [B, N, T, S] float32 logits, 0 where the mask forbids attending (so a
    student and its teacher agree there by construction).
  """
  scale = q.shape[-1] ** -0.5 if scale is None else scale
  logits = _logits(q, k, bias, scale, compute_dtype(dtype))
  mask, _ = _dense_mask(mask)
  return logits if mask is None else jnp.where(mask, logits, 0.0)


def _dense_attention(q, k, v, mask, bias, scale, dtype, dropout):
  logits = _logits(q, k, bias, scale, dtype)
  if mask is not None:
    logits = jnp.where(mask, logits, _MASK_VALUE)
  probs = jax.nn.softmax(logits, axis=-1)
  if dropout is not None:
    probs = dropout(probs)
  return einsum("bnts,bsnh->btnh", probs, v, dtype)


def attention(q: Array, k: Array, v: Array, *, mask=None,
              bias: Array | None = None, scale: float | None = None,
              dtype: str = "float32", impl: str = "auto",
              dropout: Callable[[Array], Array] | None = None) -> Array:
  """Multi-head dot-product attention, the one kernel of the zoo.

  Args:
    q: [B, T, N, H] queries.
    k: [B, S, N, H] keys.
    v: [B, S, N, H] values.
    mask: bool, True = may attend; [B|1, T, S] or [B|1, N|1, T, S], or a
      `masks.Segmented` self-attention mask (which fused kernels can read).
    bias: float added to the logits, broadcastable to [B, N, T, S].
    scale: logit scale; None = 1 / sqrt(H).
    dtype: compute dtype name; logits and softmax are float32 either way.
    impl: "einsum" (exact, supports dropout), "xla" or "cudnn"
      (`jax.nn.dot_product_attention`), "splash" (the TPU kernel of
      `zoo.models.splash`; a `Segmented` mask, no bias, no dropout, T a
      multiple of 128), "cpu" (the CPU kernel of `zoo.models.cpu_attention`
      on CPU, einsum elsewhere; float32, H <= 64, dropout a `KeyedDropout`),
      or "auto": splash on TPU where it applies, cuDNN flash attention on
      GPU in bfloat16, the CPU kernel where `cpu_attention.applies`, else
      einsum.
    dropout: applied to the attention probabilities (forces "einsum",
      except a `dropout.KeyedDropout`, which the CPU kernel draws itself).

  Returns:
    [B, T, N, H] float32.
  """
  cdtype = compute_dtype(dtype)
  scale = q.shape[-1] ** -0.5 if scale is None else scale
  mask, segmented = _dense_mask(mask)
  if impl not in ("auto", "einsum", "xla", "cudnn", "splash", "cpu"):
    raise ValueError(f"unknown attention impl {impl!r}")
  fits = splash.applies(q.shape[1], k.shape[1], segmented, bias, dropout)
  auto = impl == "auto"
  if auto:
    impl = _auto_impl(q, k, cdtype, fits, dropout)
  if impl == "cpu":
    return _cpu_attention(q, k, v, mask, bias, scale, cdtype, dropout)
  if impl == "splash":
    if not fits:
      raise ValueError("splash attention needs a Segmented self-attention "
                       "mask, no bias, no attention dropout and a length "
                       f"that is a multiple of {splash.BLOCK}")
    return splash.attention(q, k, v, segmented, scale, cdtype)
  if impl == "einsum" or dropout is not None:
    return _dense_attention(q, k, v, mask, bias, scale, cdtype, dropout)
  try:
    return _fused_attention(q, k, v, mask, bias, scale, cdtype, impl)
  except (ValueError, NotImplementedError):
    if not auto:
      raise
    # cuDNN refuses some shapes at trace time; XLA's kernel takes them all.
    return _fused_attention(q, k, v, mask, bias, scale, cdtype, "xla")


def _auto_impl(q, k, cdtype, fits: bool, dropout) -> str:
  """What "auto" means for this call (see `attention`)."""
  impl = splash.auto_impl(cdtype == jnp.bfloat16, fits)
  if (impl == "einsum" and splash.platform() == "cpu"
      and cpu_attention.applies(q, k, cdtype, dropout)):
    return "cpu"
  return impl


def _cpu_attention(q, k, v, mask, bias, scale, cdtype, dropout):
  reason = cpu_attention.why_not(q, k, cdtype, dropout)
  if reason:
    raise ValueError(f"the CPU attention kernel cannot take {reason}")
  dense = lambda: _dense_attention(q, k, v, mask, bias, scale, cdtype,  # pylint: disable=g-long-lambda
                                   dropout)
  return cpu_attention.attention(q, k, v, mask, bias, scale, dropout, dense)


def _fused_attention(q, k, v, mask, bias, scale, cdtype, impl):
  out = jax.nn.dot_product_attention(
      q.astype(cdtype), k.astype(cdtype), v.astype(cdtype),
      bias=None if bias is None else bias.astype(cdtype), mask=mask,
      scale=scale, implementation=impl)
  return out.astype(jnp.float32)


class MultiHeadAttention(nn.Module):
  """Self- or cross-attention with separate query/key/value projections.

  Applied with the "intermediates" collection mutable, it also sows its
  `attention_scores` [B, N, T, S] as "scores".

  Params: query/key/value kernels [D, N, H] (`embed, heads, kv`), out kernel
  [N, H, D] (`heads, kv, embed`), biases when `use_bias`.

  Attributes:
    num_heads: N.
    head_dim: H.
    dtype: compute dtype name.
    use_bias: projection biases (BERT yes, T5 no).
    scale: logit scale; None = 1 / sqrt(H) (T5 uses 1.0).
    dropout_rate: dropout on the attention probabilities.
    impl: see `attention`.
    out_features: D of the output; None = D of the query input.
    kernel_init: initializer of the four kernels (unless `fan_in`).
    fan_in: T5's init instead: every kernel N(0, 1/fan_in), the query's
      further scaled by 1/H (its logits then have unit scale unscaled).
  """
  num_heads: int
  head_dim: int
  dtype: str = "float32"
  use_bias: bool = True
  scale: float | None = None
  dropout_rate: float = 0.0
  impl: str = "auto"
  out_features: int | None = None
  kernel_init: Initializer = default_init
  fan_in: bool = False

  def _init(self, in_dims: int, scale: float = 1.0) -> Initializer:
    return fan_in_init(in_dims, scale) if self.fan_in else self.kernel_init

  @nn.compact
  def __call__(self, x: Array, kv: Array | None = None, *,
               mask: Array | None = None, bias: Array | None = None,
               deterministic: bool = True) -> Array:
    """x [B, T, D], kv [B, S, D] (None = self) -> [B, T, D] float32."""
    kv = x if kv is None else kv
    proj = lambda name, scale=1.0: Dense(  # pylint: disable=g-long-lambda
        (self.num_heads, self.head_dim), ("embed", "heads", "kv"),
        use_bias=self.use_bias, dtype=self.dtype,
        kernel_init=self._init(1, scale), name=name)
    q = proj("query", 1 / self.head_dim)(x)
    k, v = proj("key")(kv), proj("value")(kv)
    if self.is_mutable_collection("intermediates"):
      # Only when the caller asks (`apply(..., mutable="intermediates")`):
      # attention distillation reads every layer's scores.
      self.sow("intermediates", "scores", attention_scores(
          q, k, mask=mask, bias=bias, scale=self.scale, dtype=self.dtype))
    dropout = None
    if self.dropout_rate > 0 and not deterministic:
      # keyed: a key the CPU kernel draws the same mask from
      dropout = Dropout(self.dropout_rate, deterministic=False).keyed()
    out = attention(q, k, v, mask=mask, bias=bias, scale=self.scale,
                    dtype=self.dtype, impl=self.impl, dropout=dropout)
    return Dense(self.out_features or x.shape[-1], ("heads", "kv", "embed"),
                 in_dims=2, use_bias=self.use_bias, dtype=self.dtype,
                 kernel_init=self._init(2), name="out")(out)


# ------------------------------------------------------------ mlp, norms ---

ACTIVATIONS = {
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
    "gelu_tanh": lambda x: jax.nn.gelu(x, approximate=True),
    "relu": jax.nn.relu,
    "silu": jax.nn.silu,
}


def activation_fn(name: str) -> Callable[[Array], Array]:
  """The function of an activation name ("gated_" prefix stripped)."""
  base = name.removeprefix("gated_")
  if base not in ACTIVATIONS:
    raise ValueError(f"unknown activation {name!r}; known: "
                     f"{sorted(ACTIVATIONS)} and their 'gated_' forms")
  return ACTIVATIONS[base]


class Mlp(nn.Module):
  """Position-wise feed-forward: D -> F -> D.

  "gated_<act>" (T5 v1.1) computes act(x wi_0) * (x wi_1); otherwise
  act(x wi). Params: wi or wi_0/wi_1 [D, F] (`embed, mlp`), wo [F, D].

  Attributes:
    mlp_dim: F.
    activation: "gelu" (exact erf), "gelu_tanh", "relu", "silu", or gated_.
    use_bias: biases on both projections.
    dropout_rate: dropout on the hidden [.., F] activations (T5 style).
    dtype: compute dtype name.
    kernel_init: initializer of the kernels (unless `fan_in`).
    fan_in: T5's init instead: each kernel N(0, 1/fan_in).
  """
  mlp_dim: int
  activation: str = "gelu"
  use_bias: bool = True
  dropout_rate: float = 0.0
  dtype: str = "float32"
  kernel_init: Initializer = default_init
  fan_in: bool = False

  @nn.compact
  def __call__(self, x: Array, deterministic: bool = True) -> Array:
    """x [B, T, D] -> [B, T, D] float32."""
    act = activation_fn(self.activation)
    dense = lambda f, axes, name: Dense(  # pylint: disable=g-long-lambda
        f, axes, use_bias=self.use_bias, dtype=self.dtype,
        kernel_init=fan_in_init() if self.fan_in else self.kernel_init,
        name=name)
    if self.activation.startswith("gated_"):
      # Each branch's gradient feeds its kernel's and the input's matmul;
      # materialised once, it is not recomputed (activation derivative
      # included) inside both (5-10% of a T5-small step on CPU). Ungated
      # MLPs measured slower with it.
      up = lambda name: grad_barrier(
          dense(self.mlp_dim, ("embed", "mlp"), name)(x))
      h = act(up("wi_0")) * up("wi_1")
    else:
      h = act(dense(self.mlp_dim, ("embed", "mlp"), "wi")(x))
    h = Dropout(self.dropout_rate)(h, deterministic=deterministic)
    return dense(x.shape[-1], ("mlp", "embed"), "wo")(h)


class LayerNorm(nn.Module):
  """LayerNorm over the last axis, computed in float32.

  Attributes:
    epsilon: added to the variance.
    use_bias: learn a shift.
  """
  epsilon: float = 1e-12
  use_bias: bool = True

  @nn.compact
  def __call__(self, x: Array) -> Array:
    """x [..., D] -> [..., D] float32."""
    x = x.astype(jnp.float32)
    d = x.shape[-1]
    mean = x.mean(-1, keepdims=True)
    var = jnp.square(x - mean).mean(-1, keepdims=True)
    y = (x - mean) * jax.lax.rsqrt(var + self.epsilon)
    y = y * param_with_axes(self, "scale", nn.initializers.ones, (d,),
                            ("embed",))
    if self.use_bias:
      y = y + param_with_axes(self, "bias", nn.initializers.zeros, (d,),
                              ("embed",))
    return y


class RMSNorm(nn.Module):
  """Root-mean-square norm (T5), computed in float32, scale only."""
  epsilon: float = 1e-6

  @nn.compact
  def __call__(self, x: Array) -> Array:
    """x [..., D] -> [..., D] float32."""
    x = x.astype(jnp.float32)
    var = jnp.square(x).mean(-1, keepdims=True)
    scale = param_with_axes(self, "scale", nn.initializers.ones,
                            (x.shape[-1],), ("embed",))
    return x * jax.lax.rsqrt(var + self.epsilon) * scale


def make_norm(kind: str, epsilon: float, name: str | None = None) -> Any:
  """A norm module by kind: "layernorm" | "rmsnorm"."""
  if kind == "layernorm":
    return LayerNorm(epsilon=epsilon, name=name)
  if kind == "rmsnorm":
    return RMSNorm(epsilon=epsilon, name=name)
  raise ValueError(f"unknown norm {kind!r}; use 'layernorm' or 'rmsnorm'")


class Adapter(nn.Module):
  """Bottleneck adapter (Houlsby et al.): x + up(gelu(down(x))).

  The up projection starts at zero, so an added adapter is the identity.
  Params: down [D, A] (`embed, adapter`), up [A, D] (`adapter, embed`).

  Attributes:
    dim: the bottleneck width A.
    dtype: compute dtype name.
  """
  dim: int
  dtype: str = "float32"

  @nn.compact
  def __call__(self, x: Array) -> Array:
    """x [B, T, D] -> [B, T, D] float32."""
    h = Dense(self.dim, ("embed", "adapter"), dtype=self.dtype,
              kernel_init=nn.initializers.normal(1e-3), name="down")(x)
    h = jax.nn.gelu(h, approximate=False)
    return x + Dense(x.shape[-1], ("adapter", "embed"), dtype=self.dtype,
                     kernel_init=nn.initializers.zeros, name="up")(h)
