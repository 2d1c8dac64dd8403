"""Axial position embeddings (Kitaev et al. 2020; Ho et al. 2019).

A position p < A_1 * ... * A_k is written in the mixed radix
(A_1, ..., A_k), row-major; digit i looks up its own table [A_i, d_i] and
the pieces are concatenated, d_1 + ... + d_k = D. Millions of positions
then cost sum A_i * d_i params instead of P * D (Reformer's 2^19 positions:
(512, 1024) x (64, 192), 230k params).

Letters: B batch, T length, D embed.
"""

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from zoo.models import layers

Array = jax.Array


def check(shape: tuple[int, ...], dims: tuple[int, ...], embed_dim: int,
          max_len: int) -> None:
  """Refuses axial tables that do not make D, or cover fewer than
  `max_len` positions."""
  if len(shape) != len(dims):
    raise ValueError(f"axial_shape {shape} and axial_dims {dims} must have "
                     "the same length")
  if sum(dims) != embed_dim:
    raise ValueError(f"axial_dims {dims} must sum to embed_dim {embed_dim}")
  if math.prod(shape) < max_len:
    raise ValueError(f"axial_shape {shape} covers {math.prod(shape)} "
                     f"positions, fewer than max_len {max_len}")


class AxialPositions(nn.Module):
  """Axial position embeddings: tables `axis_<i>` [A_i, d_i]
  (`positions, embed`).

  Attributes:
    shape: (A_1, ..., A_k).
    dims: (d_1, ..., d_k), summing to D.
  """
  shape: tuple[int, ...]
  dims: tuple[int, ...]

  @nn.compact
  def __call__(self, positions: Array) -> Array:
    """positions [B, T] int -> [B, T, D] float32."""
    out, stride = [], math.prod(self.shape)
    for i, (size, dim) in enumerate(zip(self.shape, self.dims)):
      stride //= size
      table = layers.param_with_axes(self, f"axis_{i}", layers.default_init,
                                     (size, dim), ("positions", "embed"))
      out.append(jnp.take(table, (positions // stride) % size, axis=0))
    return jnp.concatenate(out, axis=-1)
