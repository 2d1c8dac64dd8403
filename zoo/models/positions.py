"""Position encodings as pure functions: sinusoidal codes and T5's
relative-position buckets. `zoo.models.layers` re-exports them beside the
modules that use them (`position_init`, `RelativePositionBias`).
"""

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array


def sinusoidal(positions: Array, features: int,
               max_timescale: float = 1e4) -> Array:
  """Transformer sine/cosine position codes.

  Args:
    positions: [B, T] int or float positions.
    features: D (even).
    max_timescale: the longest wavelength.

  Returns:
    [B, T, D] float32: sin in the first half, cos in the second.
  """
  if features % 2:
    raise ValueError(f"sinusoidal features must be even, got {features}")
  half = features // 2
  inv = 1.0 / (max_timescale ** (np.arange(half, dtype=np.float32) / half))
  angles = positions.astype(jnp.float32)[..., None] * inv
  return jnp.concatenate([jnp.sin(angles), jnp.cos(angles)], axis=-1)


def relative_position_bucket(relative: Array, *, bidirectional: bool,
                             num_buckets: int, max_distance: int) -> Array:
  """T5's log-spaced bucket of a relative position (key - query).

  Args:
    relative: int array of `key_pos - query_pos`, any shape.
    bidirectional: whether future keys get their own buckets (encoders).
    num_buckets: total buckets.
    max_distance: distances beyond this share the last bucket.

  Returns:
    int32 buckets in [0, num_buckets), same shape.
  """
  bucket = jnp.zeros_like(relative)
  n = num_buckets
  if bidirectional:
    n //= 2
    bucket = bucket + (relative > 0).astype(relative.dtype) * n
    distance = jnp.abs(relative)
  else:
    distance = -jnp.minimum(relative, 0)
  exact = n // 2
  is_small = distance < exact
  # Guard log(0); small distances take the exact branch anyway.
  log_ratio = jnp.log(jnp.maximum(distance, 1).astype(jnp.float32) / exact)
  large = exact + (log_ratio / np.log(max_distance / exact)
                   * (n - exact)).astype(relative.dtype)
  large = jnp.minimum(large, n - 1)
  return (bucket + jnp.where(is_small, distance, large)).astype(jnp.int32)


def alibi_slopes(num_heads: int) -> np.ndarray:
  """ALiBi's per-head slopes (Press et al. 2022): 2^(-8 h / N), h = 1..N.

  Returns:
    [N] float32, the steepest first.
  """
  return (2.0 ** (-8.0 * np.arange(1, num_heads + 1) / num_heads)).astype(
      np.float32)


def alibi_bias(positions: Array, num_heads: int) -> Array:
  """Symmetric linear distance penalties on attention logits (an encoder's
  ALiBi): head h adds -slope_h |p_i - p_j|.

  Args:
    positions: [B, T] int positions (within each document).
    num_heads: N.

  Returns:
    [B, N, T, T] float32 bias, 0 on the diagonal.
  """
  distance = jnp.abs(positions[:, :, None] - positions[:, None, :])
  slopes = jnp.asarray(alibi_slopes(num_heads))
  return -slopes[None, :, None, None] * distance[:, None].astype(jnp.float32)
