"""Q8BERT int8 quantisation (Zafrir et al. 2019) of every family, from outside.

No model file changes: `flax.linen.intercept_methods` reroutes the calls of
`layers.Dense.__call__`, `layers.Embed.__call__` / `attend` while a context
is open:

    with quant.fake_quantized(config):       # quantisation-aware training
      out, new = model.apply({"params": p, "quant_stats": s}, x,
                             mutable=["quant_stats"])   # stats update
      out = model.apply({"params": p, "quant_stats": s}, x)  # frozen (eval)
    qvars = quant.quantize_params(p, s)      # int8 kernels, f32 scales
    quant_io.save(path, qvars); qvars = quant_io.load(path)  # safetensors
    with quant.int8_inference(config):
      out = model.apply(qvars, x)            # s8 x s8 -> s32 matmuls

`quant.qat(apply_fn)` and `quant.int8(apply_fn)` wrap an apply function in
those contexts; jit the wrapped function (interception happens at trace
time, so a function traced outside a context stays float in the jit cache).

What is quantised, as in Q8BERT: the kernel and the input activation of
every `Dense` (symmetric, per tensor: scale = max|W| / 127 for weights,
EMA(max|x|) / 127 for inputs), every embedding table, and the input of
tied output logits (`Embed.attend`). Attention score matmuls, softmax,
norms, GELU and biases stay float32 (Q8BERT quantised biases to int32;
float biases here cost nothing in accuracy). Fake quantisation uses the
straight-through estimator: the gradient passes as the identity where
|x| <= range and is zero where the input was clipped.

Collections: "quant_stats" holds, per module, `input_amax` (Dense),
`attend_amax` and `embedding_amax` (Embed; the latter also marks the table
for export). The EMA updates only where the collection is mutable. Flax
creates variables from an interceptor: the call runs inside the module's
method (`put_variable` from a non-compact method such as `attend` works as
well). `nn.scan` only shows a layer the collections in its `variable_axes`:
the scanned `blocks.Stack` stacks "quant_stats" and "quant_scales" on a
leading L axis (`blocks.SCANNED_COLLECTIONS`); other families' own scans
(Longformer, XLNet, Transformer-XL, Reformer) raise an error naming the
module.

Maintained libraries were tried: qwix (pip: qwix 0.1.8) calibrates static
activation ranges by a simple moving average, not Q8BERT's decayed EMA, and
leaves embedding lookups float; aqtp (0.9.0, superseded by qwix) needs a
`dot_general` injected into each layer, so neither fits without editing
the families.

Letters: B batch, T length, D embed, V vocab, L layers; K the contracted
size of a Dense (D, or N x H), O its output size.
"""

import contextlib
import contextvars
import dataclasses
import functools
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import traverse_util

from zoo.models import layers

Array = jax.Array
STATS = "quant_stats"
SCALES = "quant_scales"
# Names in SCALES that each int8 param needs (besides `<param>_scale`).
INPUT_SCALE = {"kernel": "input_scale"}


@dataclasses.dataclass(frozen=True)
class QuantConfig:
  """How to quantise.

  Attributes:
    bits: integer bits, 2..8 (int8 inference needs 8 or fewer).
    ema_decay: decay of the moving max |x| of inputs (Q8BERT: 0.9999).
    embeddings: quantise embedding tables and tied output logits.
  """
  bits: int = 8
  ema_decay: float = 0.9999
  embeddings: bool = True

  def __post_init__(self):
    if not 2 <= self.bits <= 8:
      raise ValueError(f"bits must be in 2..8, got {self.bits}")
    if not 0.0 <= self.ema_decay < 1.0:
      raise ValueError(f"ema_decay must be in [0, 1), got {self.ema_decay}")

  @property
  def qmax(self) -> int:
    """The largest integer code, 2^(bits-1) - 1 (127 for int8)."""
    return 2 ** (self.bits - 1) - 1


# ------------------------------------------------------------------ math ---


def _bound(amax: Array) -> Array:
  """amax [...] -> the clipping range [...]; 1.0 where amax is 0 (an
  all-zero tensor quantises to zeros with any scale)."""
  amax = jnp.asarray(amax, jnp.float32)
  return jnp.where(amax > 0, amax, 1.0)


def scale_of(amax: Array, qmax: int) -> Array:
  """amax [...] f32 -> scale [...] f32 = amax / qmax (one step of the grid)."""
  return _bound(amax) / qmax


def quantize(x: Array, scale: Array, qmax: int) -> Array:
  """x [...] float, scale broadcastable -> int8 codes in [-qmax, qmax]."""
  return jnp.clip(jnp.round(x / scale), -qmax, qmax).astype(jnp.int8)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _ste_round(x: Array, scale: Array, codes: bool) -> Array:
  q = jnp.round(x / scale)
  return q if codes else q * scale


def _ste_fwd(x, scale, codes):
  return _ste_round(x, scale, codes), scale


def _ste_bwd(codes, scale, g):
  return (g / scale if codes else g), jnp.zeros_like(scale)


_ste_round.defvjp(_ste_fwd, _ste_bwd)


def _clip(x: Array, amax: Array) -> tuple[Array, Array]:
  """x clipped to ±amax (gradient 1 inside, incl. the ends; 0 outside),
  and the bound, without gradient."""
  bound = jax.lax.stop_gradient(_bound(amax))
  return jnp.where(jnp.abs(x) <= bound, x, jnp.sign(x) * bound), bound


def fake_quant(x: Array, amax: Array, qmax: int) -> Array:
  """x [...] f32 on the symmetric grid of `amax` / qmax, clipped to ±amax.

  The forward is `round(clip(x) / s) * s` exactly (identity on grid
  points); the backward is the straight-through estimator: gradient 1
  where |x| <= amax, 0 where x was clipped. No gradient reaches `amax`.
  """
  clipped, bound = _clip(x, amax)
  return _ste_round(clipped, bound / qmax, False)


def fake_codes(x: Array, amax: Array, qmax: int) -> Array:
  """The integer codes round(clip(x) / s) of `fake_quant` as f32 [...];
  gradient 1/s where |x| <= amax, 0 where clipped (so codes * s has the
  straight-through gradient)."""
  clipped, bound = _clip(x, amax)
  return _ste_round(clipped, bound / qmax, True)


def ema_update(old: Array, current: Array, decay: float) -> Array:
  """The moving max: `current` on the first update (old == 0), else
  decay * old + (1 - decay) * current. Scalars or [L] f32."""
  return jnp.where(old > 0, decay * old + (1.0 - decay) * current, current)


def abs_max(x: Array) -> Array:
  """max |x| as an f32 scalar, without gradient."""
  return jax.lax.stop_gradient(jnp.max(jnp.abs(x)).astype(jnp.float32))


def int8_matmul(x: Array, codes: Array, dims, x_scale: Array,
                w_scale: Array, qmax: int) -> Array:
  """x [..., K] float times int8 codes [K, ...] -> f32, in integers.

  x is quantised with `x_scale`; `lax.dot_general` multiplies s8 x s8 and
  accumulates in s32 (exact: K * 127^2 < 2^31 for K < 133,000); the s32
  result is rescaled by x_scale * w_scale. `dims` as in `dot_general`.
  """
  if codes.dtype != jnp.int8:
    raise ValueError(f"int8 inference needs int8 weights, got {codes.dtype}"
                     "; pass the variables of `quantize_params`")
  acc = jax.lax.dot_general(quantize(x, x_scale, qmax), codes, dims,
                            preferred_element_type=jnp.int32)
  return acc.astype(jnp.float32) * (x_scale * w_scale)


# --------------------------------------------------- module variables ---


def _where(module: nn.Module) -> str:
  return "/".join(module.path) or "<root>"


def _param(module: nn.Module, name: str) -> Array:
  value = module.get_variable("params", name)
  if value is None:
    raise ValueError(f"{_where(module)} has no param {name!r}")
  return nn.meta.unbox(value)


def _input_amax(module: nn.Module, name: str, x: Array,
                config: QuantConfig) -> Array:
  """The input range of a quantised matmul: updated by the EMA of
  max |x| where "quant_stats" is mutable (training), read where frozen."""
  old = module.get_variable(STATS, name)
  frozen = _FROZEN.get()
  if old is None and frozen is not None:
    old = frozen.get(tuple(module.path), {}).get(name)
  if module.is_mutable_collection(STATS):
    old = jnp.zeros((), jnp.float32) if old is None else old
    new = ema_update(old, abs_max(x), config.ema_decay)
    module.put_variable(STATS, name, new)
    return new
  if old is None:
    raise ValueError(
        f"{_where(module)} has no {STATS!r}/{name}: run a training or "
        f"calibration apply with mutable=[{STATS!r}] first; inside an "
        f"nn.scan whose variable_axes lack {STATS!r} (a family's own "
        "scanned layers) quantisation-aware mode is not supported: set "
        "scan_layers=False")
  return old


def _scale(module: nn.Module, name: str) -> Array:
  value = module.get_variable(SCALES, name)
  if value is None:
    raise ValueError(f"{_where(module)} has no {SCALES!r}/{name}: int8 "
                     "inference reads the variables of `quantize_params` "
                     "(inside a family's own nn.scan it cannot: set "
                     "scan_layers=False)")
  return value


def _mark_table(module: nn.Module, table: Array) -> None:
  """Records max |table| in the stats (marks the table for export)."""
  if module.is_mutable_collection(STATS):
    module.put_variable(STATS, "embedding_amax", abs_max(table))


# -------------------------------------------------------------- handlers ---


def _contract_dims(x: Array, in_dims: int):
  """dot_general dims of x [..., *K] with a kernel [*K, *O]."""
  return ((tuple(range(x.ndim - in_dims, x.ndim)), tuple(range(in_dims))),
          ((), ()))


def _fake_matmul(x: Array, x_amax: Array, w: Array, dims, dtype: str,
                 qmax: int) -> Array:
  """The fake-quantised twin of `int8_matmul`: x [..., K], w [K, ...].

  Integer codes (exact in float32, and in bfloat16 up to 256) are
  multiplied in the compute dtype, then rescaled: integer sums below 2^24
  are exact, so for the same inputs this is `int8_matmul`'s result bit
  for bit, with the straight-through gradient of `fake_quant` on both
  operands. (Whole models still differ by a code here and there: the two
  compiled programs round the float ops between matmuls differently.)
  """
  cdtype = layers.compute_dtype(dtype)
  w_amax = abs_max(w)
  acc = jax.lax.dot_general(
      fake_codes(x, x_amax, qmax).astype(cdtype),
      fake_codes(w, w_amax, qmax).astype(cdtype), dims,
      **layers.matmul_precision(cdtype))
  return acc.astype(jnp.float32) * (scale_of(x_amax, qmax) *
                                    scale_of(w_amax, qmax))


def _dense(module: layers.Dense, x: Array, mode: str,
           config: QuantConfig) -> Array:
  """`Dense.__call__` quantised: x [..., *K] -> [..., *O] f32."""
  kernel = _param(module, "kernel")
  dims = _contract_dims(x, module.in_dims)
  if mode == "fake":
    y = _fake_matmul(x, _input_amax(module, "input_amax", x, config),
                     kernel, dims, module.dtype, config.qmax)
  else:
    y = int8_matmul(x, kernel, dims, _scale(module, "input_scale"),
                    _scale(module, "kernel_scale"), config.qmax)
  return y + _param(module, "bias") if module.use_bias else y


def _lookup(module: layers.Embed, ids: Array, mode: str,
            config: QuantConfig) -> Array:
  """`Embed.__call__` from a quantised table: ids [B, T] -> [B, T, D]."""
  if not jnp.issubdtype(ids.dtype, jnp.integer):
    raise ValueError(f"embedding ids must be integers, got {ids.dtype}")
  table = module.embedding
  if mode == "fake":
    _mark_table(module, table)
    return jnp.take(fake_quant(table, abs_max(table), config.qmax), ids,
                    axis=0)
  rows = jnp.take(_int8(module, table), ids, axis=0)
  return rows.astype(jnp.float32) * _scale(module, "embedding_scale")


def _attend(module: layers.Embed, x: Array, mode: str,
            config: QuantConfig) -> Array:
  """`Embed.attend` quantised: x [B, T, D] -> logits [B, T, V] f32."""
  table = module.embedding
  dims = (((x.ndim - 1,), (1,)), ((), ()))
  if mode == "fake":
    _mark_table(module, table)
    return _fake_matmul(x, _input_amax(module, "attend_amax", x, config),
                        table, dims, module.dtype, config.qmax)
  return int8_matmul(x, _int8(module, table), dims,
                     _scale(module, "attend_input_scale"),
                     _scale(module, "embedding_scale"), config.qmax)


def _int8(module: nn.Module, table: Array) -> Array:
  if table.dtype != jnp.int8:
    raise ValueError(f"{_where(module)}: int8 inference needs an int8 "
                     f"table, got {table.dtype}")
  return table


_HANDLERS = (
    (layers.Dense, "__call__", _dense),
    (layers.Embed, "__call__", _lookup),
    (layers.Embed, "attend", _attend),
)


def _handler(module: nn.Module, method: str, config: QuantConfig):
  for cls, name, fn in _HANDLERS:
    if isinstance(module, cls) and method == name:
      if cls is layers.Embed and not config.embeddings:
        return None
      return fn
  return None


def _outside(module: nn.Module) -> bool:
  """Whether frozen stats were given (`fake_quantized(stats=...)`) and do
  not cover this module: a model's new parts (a task head fine-tuned on
  top of a calibrated backbone) then stay float."""
  frozen = _FROZEN.get()
  return (frozen is not None and tuple(module.path) not in frozen
          and not module.is_mutable_collection(STATS)
          and not module.has_variable(STATS, "input_amax"))


def _interceptor(mode: str, config: QuantConfig):
  """The method interceptor of `mode` ("fake" or "int8")."""
  def intercept(next_fun, args, kwargs, context):
    module, method = context.module, context.method_name
    handler = _handler(module, method, config)
    if handler is None or _outside(module):
      return next_fun(*args, **kwargs)
    if module.is_initializing():
      if mode == "int8":
        raise ValueError("int8 inference runs quantised variables; init "
                         "the model in float (or fake-quantised) mode")
      if isinstance(module, layers.Dense):
        next_fun(*args, **kwargs)  # creates the params the handler reads
    return handler(module, *args, mode=mode, config=config, **kwargs)
  return intercept


# Frozen "quant_stats" given to `fake_quantized` ({module path: {name:
# value}}), read where an apply passes none: code that calls
# `model.apply({"params": p}, ...)` runs quantised unchanged.
_FROZEN = contextvars.ContextVar("frozen_quant_stats", default=None)


@contextlib.contextmanager
def fake_quantized(config: QuantConfig = QuantConfig(), stats=None):
  """Inside: quantisation-aware (fake int8) Dense and Embed calls.

  "quant_stats" updates where the apply makes it mutable (training,
  calibration) and is read where it is frozen (evaluation); `init` inside
  the context returns stats calibrated on the init batch. `stats` (a
  "quant_stats" tree, e.g. `zoo.compress.calibration.calibrate`'s) serves
  every apply that passes no stats of its own: any function built on
  `model.apply({"params": p}, ...)` runs fake-quantised; modules the stats
  do not name (a task head trained on top) stay float. Interception happens at trace time, so
  functions jitted outside the context must be traced again inside it
  (`jax.clear_caches()`).
  """
  token = _FROZEN.set(None if stats is None else _by_module(stats))
  try:
    with nn.intercept_methods(_interceptor("fake", config)):
      yield
  finally:
    _FROZEN.reset(token)


@contextlib.contextmanager
def int8_inference(config: QuantConfig = QuantConfig()):
  """Inside: Dense and Embed calls read the int8 variables of
  `quantize_params` and multiply in s8 x s8 -> s32."""
  with nn.intercept_methods(_interceptor("int8", config)):
    yield


def _wrap(context, apply_fn: Callable[..., Any], config: QuantConfig):
  def wrapped(*args, **kwargs):
    with context(config):
      return apply_fn(*args, **kwargs)
  return wrapped


def qat(apply_fn: Callable[..., Any],
        config: QuantConfig = QuantConfig()) -> Callable[..., Any]:
  """`apply_fn` (e.g. `model.apply`) run under `fake_quantized(config)`."""
  return _wrap(fake_quantized, apply_fn, config)


def int8(apply_fn: Callable[..., Any],
         config: QuantConfig = QuantConfig()) -> Callable[..., Any]:
  """`apply_fn` run under `int8_inference(config)`."""
  return _wrap(int8_inference, apply_fn, config)


# ---------------------------------------------------------------- export ---

# A stat of "quant_stats" -> (the param it marks, the input scale it gives).
_STAT_TARGETS = {"input_amax": ("kernel", "input_scale"),
                 "attend_amax": ("embedding", "attend_input_scale"),
                 "embedding_amax": ("embedding", None)}
# A name in "quant_scales" -> the int8 param of its module it belongs to.
SCALE_OWNERS = {"kernel_scale": "kernel", "input_scale": "kernel",
                "embedding_scale": "embedding",
                "attend_input_scale": "embedding"}


def _by_module(tree) -> dict[tuple, dict[str, Any]]:
  """A nested dict -> {module path: {leaf name: leaf}}."""
  out = {}
  for key, value in traverse_util.flatten_dict(nn.meta.unbox(tree)).items():
    out.setdefault(key[:-1], {})[key[-1]] = value
  return out


def weight_scale(w: Array, lead: int, qmax: int) -> Array:
  """w [*lead, ...] -> per-tensor scales [*lead] (max |w| over the rest;
  `lead` is 1 for a scanned stack's [L, ...] kernels, else 0)."""
  amax = jnp.max(jnp.abs(w), axis=tuple(range(lead, w.ndim)))
  return scale_of(amax, qmax)


def _quantize_param(w: Array, lead: int, qmax: int):
  """w [*lead, ...] float -> (int8 codes like w, f32 scales [*lead])."""
  if not jnp.issubdtype(w.dtype, jnp.floating):
    raise ValueError(f"expected a float param to quantise, got {w.dtype}")
  return _quantize_jit(w, lead, qmax)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _quantize_jit(w: Array, lead: int, qmax: int):
  # One compiled program per shape, not one per eager op and shape.
  scale = weight_scale(w, lead, qmax)
  codes = quantize(w, scale.reshape(scale.shape + (1,) * (w.ndim - lead)),
                   qmax)
  return codes, scale


def quantize_params(params, stats, config: QuantConfig = QuantConfig()
                    ) -> dict[str, Any]:
  """Float params and their "quant_stats" -> int8 inference variables.

  Every param the stats name (a Dense `kernel` [*K, *O], an Embed
  `embedding` [V, D]; [L, ...] in a scanned stack) becomes int8 codes
  with a per-tensor f32 scale max|w| / qmax ([L] when stacked); each
  Dense and tied output also gets its input scale EMA(max|x|) / qmax.
  Other params (biases, norms, unquantised layers) stay float32.

  Returns:
    {"params": the tree with int8 leaves, "quant_scales": {module path:
    {"kernel_scale", "input_scale", "embedding_scale",
    "attend_input_scale"}}}, ready for `model.apply` under
    `int8_inference`.
  """
  flat = traverse_util.flatten_dict(nn.meta.unbox(params))
  out, scales = dict(flat), {}
  for path, leaves in _by_module(stats).items():
    for stat, amax in leaves.items():
      if stat not in _STAT_TARGETS:
        raise ValueError(f"unknown quant stat {'/'.join(path + (stat,))}")
      name, input_name = _STAT_TARGETS[stat]
      if path + (name,) not in flat:
        raise ValueError(f"stats name {'/'.join(path)} but the params have "
                         f"no {name!r} there")
      lead = jnp.ndim(amax)
      codes, scale = _quantize_param(flat[path + (name,)], lead, config.qmax)
      out[path + (name,)] = codes
      scales[path + (name + "_scale",)] = scale
      if input_name:
        scales[path + (input_name,)] = scale_of(amax, config.qmax)
  return {"params": traverse_util.unflatten_dict(out),
          SCALES: traverse_util.unflatten_dict(scales)}

