"""Dense attention as one CPU kernel (`cpu_attention.cc`, through XLA's FFI).

XLA:CPU runs a dense attention as a chain of passes over [B, N, T, S]
arrays (logits, mask, softmax's max, exponent and sum, dropout, both
products, and as many again backward), each far below the matmul peak at
the small head sizes the harness trains. The kernel takes one (batch row,
head) at a time and computes a query row's logits, mask, softmax, dropout
and products together, while the row is in cache; the backward pass
recomputes each row instead of reading stored probabilities.

Its numbers are `layers._dense_attention`'s up to float rounding, dropout
included: the keep bits are `zoo.models.dropout`'s counter hash of the
same flat [B, N, T, S] index, so both draw the same mask from one key.

`layers.attention(impl="auto")` uses it where it applies (`applies`):
float32 compute, H <= 64, no dropout or a `KeyedDropout`, one device or
an active mesh (where each device runs the kernel on its own rows and
heads, `sharding.per_device`), and a kernel that builds. Other platforms
lower the dense einsum instead (`lax.platform_dependent`), so a CPU host
still plans TPU programs. The kernel is in the library of
`zoo.models.cpu_kernels`, built for the host on first use.
`ZOO_CPU_ATTENTION=0` keeps "auto" on the einsum.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from zoo import sharding
from zoo.models import cpu_kernels
from zoo.models import dropout as dropout_lib

Array = jax.Array

ENV = "ZOO_CPU_ATTENTION"
MAX_HEAD_DIM = 64
_FORWARD, _BACKWARD = "zoo_attention_forward", "zoo_attention_backward"
off = cpu_kernels.off


def why_not(q: Array, k: Array, cdtype, dropout) -> str | None:
  """Why the kernel cannot take this call (None = it can)."""
  b, t, n, h = q.shape
  if cdtype != jnp.float32:
    return f"compute dtype {jnp.dtype(cdtype).name}, not float32"
  if h > MAX_HEAD_DIM:
    return f"head dim {h} above {MAX_HEAD_DIM}"
  if dropout is not None and not isinstance(dropout,
                                            dropout_lib.KeyedDropout):
    return "attention dropout that is not a KeyedDropout"
  if b * n * t * k.shape[1] >= 2**32:
    return "more than 2**32 - 1 attention probabilities"
  return None


def applies(q: Array, k: Array, cdtype, dropout) -> bool:
  """Whether `impl="auto"` takes the kernel for this call (never with
  `ZOO_CPU_ATTENTION=0` in the environment, nor inside `off()`).

  With several devices, only inside an active mesh (`sharding.activate`),
  where the kernel runs per device: a program sharded without one would
  gather its operands onto every device."""
  if cpu_kernels.switched_off(ENV) or cpu_kernels.is_off():
    return False
  one_device = (jax.device_count() == 1
                or not jax.sharding.get_abstract_mesh().empty)
  return (one_device and why_not(q, k, cdtype, dropout) is None
          and cpu_kernels.available())


def _full(x: Array | None, b: int, n: int, t: int, s: int, dtype) -> Array:
  """x broadcast to [B|1, N|1, T, S] (a [1, 1, 1, 1] stand-in for None)."""
  if x is None:
    return jnp.zeros((1, 1, 1, 1), dtype)
  lead = (b if x.shape[0] > 1 else 1, n if x.shape[1] > 1 else 1)
  return jnp.broadcast_to(x.astype(dtype), (*lead, t, s))


def attention(q: Array, k: Array, v: Array, mask: Array | None,
              bias: Array | None, scale: float, dropout, dense) -> Array:
  """The kernel on CPU, `dense()` on every other platform.

  Inside a sharded step (an active mesh) the kernel runs per device on its
  rows and heads (`sharding.per_device`); the global offsets of those rows
  and heads go in as operands, so each device draws its slice of the one
  global dropout mask.

  Args:
    q: [B, T, N, H]; k, v: [B, S, N, H].
    mask: bool [B|1, N|1, T, S] (or broadcastable), True = may attend.
    bias: float [B|1, N|1, T, S] (or broadcastable), added to the logits.
    scale: logit scale.
    dropout: None or a `dropout.KeyedDropout` on the probabilities.
    dense: () -> [B, T, N, H], the einsum attention of the same call.

  Returns:
    [B, T, N, H] float32.
  """
  cpu_kernels.library()
  b, t, n, _ = q.shape
  s = k.shape[1]
  mask_full = _full(mask, b, n, t, s, jnp.bool_)
  bias_full = _full(bias, b, n, t, s, jnp.float32)
  rate = 0.0 if dropout is None else float(dropout.rate)
  seeds = (jnp.zeros((2,), jnp.uint32) if dropout is None
           else dropout_lib.seeds(dropout.key))
  static = (float(scale), rate, mask is not None, bias is not None)
  args = (q.astype(jnp.float32), k.astype(jnp.float32),
          v.astype(jnp.float32), mask_full, bias_full, seeds,
          *_bases(b, n, t, s))
  qkv = sharding.ATTENTION_QKV
  names = (qkv, qkv, qkv, _lead(mask_full, b, n), _lead(bias_full, b, n),
           (None,), ("batch",), ("heads",))
  local = lambda *a: _kernel(*a, static)  # pylint: disable=unnecessary-lambda-assignment
  kernel = lambda *a: sharding.per_device(local, a, names, qkv)  # pylint: disable=unnecessary-lambda-assignment
  return jax.lax.platform_dependent(*args, cpu=kernel,
                                    default=lambda *_: dense())


def _lead(x: Array, b: int, n: int) -> tuple:
  """Logical names of a [B|1, N|1, T, S] operand's dims."""
  return ("batch" if x.shape[0] == b else None,
          "heads" if x.shape[1] == n else None, None, None)


def _bases(b: int, n: int, t: int, s: int) -> tuple[Array, Array]:
  """The flat [B, N, T, S] index of (b, n, 0, 0) as row + head parts."""
  rows = jnp.arange(b, dtype=jnp.uint32) * np.uint32(n * t * s)
  heads = jnp.arange(n, dtype=jnp.uint32) * np.uint32(t * s)
  return rows, heads


def _attrs(static) -> dict:
  scale, rate, has_mask, has_bias = static
  return dict(scale=np.float32(scale), rate=np.float32(rate),
              has_mask=has_mask, has_bias=has_bias)


@functools.partial(jax.custom_vjp, nondiff_argnums=(8,))
def _kernel(q, k, v, mask, bias, seeds, rows, heads, static):
  """The kernel on [b, T, n, H] (b rows and n heads of the global batch,
  whose flat [B, N, T, S] offsets are rows [b] + heads [n])."""
  return _forward(q, k, v, mask, bias, seeds, rows, heads, static)[0]


def _forward(q, k, v, mask, bias, seeds, rows, heads, static):
  out = jax.ffi.ffi_call(_FORWARD, jax.ShapeDtypeStruct(q.shape, jnp.float32),
                         vmap_method="sequential")(
                             q, k, v, mask, bias, seeds, rows, heads,
                             **_attrs(static))
  return out, (q, k, v, mask, bias, seeds, rows, heads)


def _backward(static, res, g):
  q, k, v, mask, bias, seeds, rows, heads = res
  has_bias = static[3]
  (b, t, n, _), s = q.shape, k.shape[1]
  shapes = (q.shape, k.shape, v.shape, (b, n, t, s) if has_bias else (1,))
  dq, dk, dv, ds = jax.ffi.ffi_call(
      _BACKWARD, tuple(jax.ShapeDtypeStruct(x, jnp.float32) for x in shapes),
      vmap_method="sequential")(q, k, v, mask, bias, seeds, rows, heads,
                                g.astype(jnp.float32), **_attrs(static))
  dbias = _sum_to(ds, bias.shape) if has_bias else jnp.zeros_like(bias)
  zero = lambda x: np.zeros(x.shape, jax.dtypes.float0)  # pylint: disable=unnecessary-lambda-assignment
  return dq, dk, dv, zero(mask), dbias, zero(seeds), zero(rows), zero(heads)


_kernel.defvjp(_forward, _backward)


def _sum_to(ds: Array, shape: tuple[int, ...]) -> Array:
  """ds [B, N, T, S] summed over the leading dims that `shape` broadcasts.

  A product with ones over those dims, in XLA: the same sums on every run
  (none depends on which thread ran which item). In a tiny T5 step, XLA:CPU
  took 47 ms to reduce two encoder layers' [32, 4, 128, 128] ds over the
  batch as a reduce, and 0.7 ms as this product (jax.profiler).
  """
  shared = "".join("bn"[i] for i in (0, 1) if shape[i] < ds.shape[i])
  if not shared:
    return ds
  keep = "".join(c for c in "bn" if c not in shared)
  ones = jnp.ones([ds.shape["bn".index(c)] for c in shared], jnp.float32)
  return jnp.einsum(f"{shared},bnts->{keep}ts", ones, ds).reshape(shape)
