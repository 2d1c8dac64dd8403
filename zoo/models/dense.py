"""The dense layer and what every parameterised module shares: the
default and fan-in initializers, compute dtypes and matmul precision, and
params carrying logical axis names. `zoo.models.layers` re-exports all of
it.
"""

import functools
import math
from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from zoo import sharding
from zoo.models import cpu_kernels

Array = jax.Array
Initializer = Callable[..., Array]

default_init = nn.initializers.normal(stddev=0.02)


def fan_in_init(in_dims: int = 1, scale: float = 1.0) -> Initializer:
  """N(0, scale / fan_in) for a kernel whose first `in_dims` axes are its
  input (Mesh TensorFlow's and T5's variance scaling, "fan_in", normal)."""
  def init(key, shape, dtype=jnp.float32):
    fan_in = math.prod(shape[:in_dims])
    return jax.random.normal(key, shape, dtype) * (scale / fan_in) ** 0.5
  return init


def uniform_init(scale: float) -> Initializer:
  """U(-scale, scale), the table init of word2vec and AWD-LSTM."""
  def init(key, shape, dtype=jnp.float32):
    return jax.random.uniform(key, shape, dtype, -scale, scale)
  return init


def compute_dtype(name: str) -> jnp.dtype:
  """The jnp dtype of a config's `dtype` name ("float32" | "bfloat16")."""
  if name not in ("float32", "bfloat16"):
    raise ValueError(f"dtype must be 'float32' or 'bfloat16', got {name!r}")
  return jnp.dtype(name)


def matmul_precision(dtype: jnp.dtype) -> dict:
  """Keyword args for `jnp.einsum`/`lax.dot_general` in a compute dtype.

  float32 asks for full precision so parity holds on accelerators whose
  default f32 matmul is reduced; bfloat16 accumulates in float32.
  """
  if dtype == jnp.bfloat16:
    return {"preferred_element_type": jnp.float32}
  return {"precision": jax.lax.Precision.HIGHEST}


def einsum(spec: str, x: Array, y: Array, dtype: jnp.dtype) -> Array:
  """`jnp.einsum(spec, x, y)` with inputs in `dtype`, float32 result."""
  out = jnp.einsum(spec, x.astype(dtype), y.astype(dtype),
                   **matmul_precision(dtype))
  return out.astype(jnp.float32)


def project(x: Array, kernel: Array, in_dims: int, dtype_name: str) -> Array:
  """x [..., *in] with kernel [*in, *out] -> [..., *out] float32.

  The trailing `in_dims` axes of x are contracted with the kernel's leading
  ones, both cast to `dtype_name` (precision as `matmul_precision`).
  """
  dtype = compute_dtype(dtype_name)
  return _contract(x.astype(dtype), kernel.astype(dtype), in_dims)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _contract(x: Array, kernel: Array, in_dims: int) -> Array:
  """`project` in x's dtype, with its backward pass written out.

  The backward is the two matmuls autodiff would derive, dx = g k^T over
  the output axes and dk = x^T g over the leading axes (the same values
  up to float rounding). Derived, XLA:CPU compiled them into slower
  programs: the MLP's weight gradients stayed on its generic matmul, and
  a tiny BERT, GPT-2 or T5 training step took about 10% longer (measured
  in turns against this form).
  """
  contract = (tuple(range(x.ndim - in_dims, x.ndim)), tuple(range(in_dims)))
  y = jax.lax.dot_general(x, kernel, (contract, ((), ())),
                          **matmul_precision(x.dtype))
  return y.astype(jnp.float32)


def _contract_fwd(x, kernel, in_dims):
  return _contract(x, kernel, in_dims), (x, kernel)


def _contract_bwd(in_dims, residuals, g):
  """g [..., *out] float32 -> (dx [..., *in], dk [*in, *out]), x's dtype.

  As autodiff's rule, g stays float32 (the product's output type) in both.
  """
  x, kernel = residuals
  kw = matmul_precision(x.dtype)
  lead = x.ndim - in_dims
  outs = (tuple(range(lead, g.ndim)), tuple(range(in_dims, kernel.ndim)))
  dx = jax.lax.dot_general(g, kernel, (outs, ((), ())), **kw)
  return dx.astype(x.dtype), _kernel_grad(x, g, lead, kw).astype(kernel.dtype)


def _kernel_grad(x: Array, g: Array, lead: int, kw: dict,
                 transposed: bool = False) -> Array:
  """dk = x^T g over the `lead` leading axes: x [*L, *I], g [*L, *O] ->
  [*I, *O] ([*O, *I] when `transposed`, a table's gradient).

  XLA:CPU's matmul library takes its lhs with the contracted axes last, so
  XLA copies the lhs transposed first, in a loop that reads it a column at
  a time: at the harness's sizes that copy took longer than the matmul. On
  CPU the copy is `cpu_kernels.transpose`'s tiled one instead (the same
  numbers), and so is the small [*I, *O] result's transpose when
  `transposed`, which XLA would otherwise fold back into a transposed
  [*L, *O] lhs; other platforms lower autodiff's product as it stands.
  XLA does not partition the custom call, so under a data-parallel mesh
  each device takes the product of its own rows, the leading axis split
  as "batch", and the devices' products are added
  (`sharding.summed_per_device`); a mesh that also splits other axes
  keeps autodiff's product, which XLA partitions.
  """
  axes = tuple(range(lead))
  derived = lambda x, g: jax.lax.dot_general(  # pylint: disable=unnecessary-lambda-assignment
      *((g, x) if transposed else (x, g)), ((axes, axes), ((), ())), **kw)
  if not (lead and cpu_kernels.transpose_applies() and
          sharding.splits_only_batch()):
    return derived(x, g)

  def tiled(x, g):
    xt = cpu_kernels.transpose(x, lead)  # [*I, *L]
    moved = tuple(range(x.ndim - lead, x.ndim))
    dk = jax.lax.dot_general(xt, g, ((moved, axes), ((), ())), **kw)
    return cpu_kernels.transpose(dk, x.ndim - lead) if transposed else dk

  names = [("batch",) + (None,) * (a.ndim - 1) for a in (x, g)]
  per_device = lambda x, g: sharding.summed_per_device(tiled, (x, g), names)  # pylint: disable=unnecessary-lambda-assignment
  return jax.lax.platform_dependent(x, g, cpu=per_device, default=derived)


_contract.defvjp(_contract_fwd, _contract_bwd)


def unembed(x: Array, table: Array, dtype_name: str) -> Array:
  """x [..., D] against a table [V, D] -> [..., V] float32 (a tied output
  head's logits), both cast to `dtype_name`.

  Its backward pass is autodiff's, written out as `project`'s is:
  dx = g table, and d table = g^T x through `_kernel_grad`.
  """
  dtype = compute_dtype(dtype_name)
  return _contract_rows(x.astype(dtype), table.astype(dtype))


@jax.custom_vjp
def _contract_rows(x: Array, table: Array) -> Array:
  y = jax.lax.dot_general(x, table, (((x.ndim - 1,), (1,)), ((), ())),
                          **matmul_precision(x.dtype))
  return y.astype(jnp.float32)


def _contract_rows_fwd(x, table):
  return _contract_rows(x, table), (x, table)


def _contract_rows_bwd(residuals, g):
  """g [..., V] float32 -> (dx [..., D], d table [V, D]), x's dtype."""
  x, table = residuals
  kw = matmul_precision(x.dtype)
  dx = jax.lax.dot_general(g, table, (((g.ndim - 1,), (0,)), ((), ())), **kw)
  dt = _kernel_grad(x, g, x.ndim - 1, kw, transposed=True)
  return dx.astype(x.dtype), dt.astype(table.dtype)


_contract_rows.defvjp(_contract_rows_fwd, _contract_rows_bwd)


def param_with_axes(module: nn.Module, name: str, init: Initializer,
                    shape: tuple[int, ...], axes: tuple[str, ...]) -> Array:
  """A float32 param whose boxed value carries logical axis names."""
  if len(shape) != len(axes):
    raise ValueError(f"param {name!r}: shape {shape} vs axes {axes}")
  return module.param(name, nn.with_logical_partitioning(init, axes), shape,
                      jnp.float32)


class Dense(nn.Module):
  """Einsum-style dense layer over trailing input axes, with logical axes.

  `y[..., out] = sum_in x[..., in] w[in, out] + b[out]`; `in_dims` trailing
  axes of x are contracted (1 for D, 2 for [N, H]).

  Attributes:
    features: output shape (int or tuple), e.g. D or (N, H).
    axes: logical names of the kernel, input axes first then output axes.
    in_dims: how many trailing axes of x the kernel contracts.
    use_bias: whether to add a bias shaped like `features`.
    dtype: compute dtype name.
    kernel_init: initializer of the kernel.
  """
  features: int | tuple[int, ...]
  axes: tuple[str, ...]
  in_dims: int = 1
  use_bias: bool = True
  dtype: str = "float32"
  kernel_init: Initializer = default_init

  @nn.compact
  def __call__(self, x: Array) -> Array:
    """x [..., *in] -> [..., *features] float32."""
    features = ((self.features,) if isinstance(self.features, int)
                else tuple(self.features))
    in_shape = x.shape[x.ndim - self.in_dims:]
    kernel = param_with_axes(self, "kernel", self.kernel_init,
                             in_shape + features, self.axes)
    y = project(x, kernel, self.in_dims, self.dtype)
    if self.use_bias:
      out_axes = self.axes[self.in_dims:]
      y = y + param_with_axes(self, "bias", nn.initializers.zeros, features,
                              out_axes)
    return y
