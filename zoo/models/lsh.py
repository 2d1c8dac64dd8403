"""Reformer's attentions: LSH attention and local (chunked) attention.

Kitaev et al. 2020, as Hugging Face's `LSHSelfAttention` and
`LocalSelfAttention` compute them (causal, as `ReformerModelWithLMHead`
runs them). Both are chunked: positions in some order are cut into chunks
of C, and each chunk's queries read the keys of itself and of the
`before` chunks preceding it (the first chunk wraps around to the last
ones, as the reference's `_look_adjacent` does; causality masks what that
brings in). Inside a chunk a key is read when it is in the query's document
(`segments`, 0 = padding, never read) and at or before the query's row
position. Cost: O(T * C) per head, never T x T.

Local attention keeps positions in order. LSH attention shares one
projection between queries and keys (keys are the queries normalised to
unit RMS, then scaled by 1/sqrt(H)), hashes them R times (`num_hashes`)
by random rotations (angular LSH: the bucket of x is the argmax of
[xW, -xW], W [H, K/2] random normal; a factorised `num_buckets` (K1, K2)
hashes each factor on its own slice of W and combines them as
b1 + K1 * b2), sorts each round by (bucket, position), and attends within
chunks of that order. Padding goes to a bucket of its own after the last.
A query never reads its own position unless no other key is visible
(its logit is -1e5 where masked keys get -1e9). The R rounds' outputs are
combined by their log-sum-exp weights: each round's output is the softmax
over its keys, and round r gets weight exp(lse_r) / sum exp(lse).

A row no longer than C (`T <= chunk`) is attended densely: one chunk, no
hashing, in either attention.

Causality caveat (of the method, as published): which past keys share a
query's chunk depends on the buckets of every token in the row, later
ones included, so in LSH layers a query's visible set may shift with the
future; no future key is ever read.

Letters: B batch, T length, N heads, H head dim, R hash rounds, M = R * T
sorted slots, U chunks, C chunk length, S keys per chunk ((before + 1) C),
K the rotated width.
"""

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from zoo.models import layers

Array = jax.Array
MASK_VALUE = -1e9  # a key the query may not read (the reference's value)
SELF_VALUE = -1e5  # the query's own position in LSH attention: read only
                   # when nothing else is visible


def bucket_factors(num_buckets) -> tuple[int, ...]:
  """`num_buckets` (an int or a factorisation) as a tuple of factors."""
  if isinstance(num_buckets, int):
    return (num_buckets,)
  return tuple(num_buckets)


def rotation_shape(num_heads: int, head_dim: int, num_hashes: int,
                   num_buckets) -> tuple[int, int, int, int]:
  """[N, H, R, K/2]: one random rotation per head and round, K/2 columns
  for every factor of `num_buckets` together (the reference's layout)."""
  half = sum(f // 2 for f in bucket_factors(num_buckets))
  return (num_heads, head_dim, num_hashes, half)


def random_rotations(key: Array, shape: tuple[int, ...]) -> Array:
  """float32 standard normal rotations [N, H, R, K/2] from a key."""
  return jax.random.normal(key, shape, jnp.float32)


def hash_buckets(qk: Array, rotations: Array, num_buckets,
                 real: Array) -> Array:
  """Angular LSH buckets of every round, offset so rounds never mix.

  Args:
    qk: [B, N, T, H] shared query/key vectors (no gradient flows).
    rotations: [N, H, R, K/2] float.
    num_buckets: an even int, or a tuple of even factors.
    real: [B, T] bool, False on padding (its own bucket, after the rest).

  Returns:
    int32 [B, N, R, T]: bucket + round * (num_buckets + 1).
  """
  b, n, t, h = qk.shape
  rounds = rotations.shape[2]
  # Heads lead both operands ([N, B*T, H] x [N, H, R*K/2]): XLA's CPU dot
  # then writes its [.., R*K/2] rows in place, 2.5x faster than with the
  # rounds between heads and positions.
  rotated = jnp.einsum(
      "nxh,nhk->nxk",
      jnp.swapaxes(jax.lax.stop_gradient(qk), 0, 1).reshape(n, b * t, h),
      rotations.astype(jnp.float32).reshape(n, h, -1),
      precision=jax.lax.Precision.HIGHEST).reshape(n, b, t, rounds, -1)
  bucket, start, total = 0, 0, 1
  for factor in bucket_factors(num_buckets):
    part = rotated[..., start:start + factor // 2]
    side = angular_side(part)
    bucket = bucket + total * side.astype(jnp.int32)
    start, total = start + factor // 2, total * factor
  bucket = jnp.transpose(bucket, (1, 0, 3, 2))  # [N, B, T, R] -> [B, N, R, T]
  bucket = jnp.where(real[:, None, None, :], bucket, total)
  offsets = jnp.arange(rounds, dtype=jnp.int32)[:, None]
  return bucket + offsets * (total + 1)


def angular_side(part: Array) -> Array:
  """`argmax(concat([part, -part]), -1)` without the concatenation: the
  largest |value|, plus K/2 where it is negative. The two differ only
  where a value and another's negation tie exactly. XLA's argmax on a CPU
  costs about 7x a max per element, and at the paper's 2T/C buckets
  hashing reduces O(T^2 / C) values: one argmax over K/2 is 4x faster."""
  i = jnp.argmax(jnp.abs(part), axis=-1)
  negative = jnp.take_along_axis(part, i[..., None], axis=-1)[..., 0] < 0
  return i.astype(jnp.int32) + negative * part.shape[-1]


def look_back(x: Array, before: int) -> Array:
  """Chunks [B, N, U, C, ...] -> [B, N, U, S, ...]: each chunk preceded by
  the `before` chunks before it (cyclically), oldest first."""
  if before == 0:
    return x
  parts = [jnp.roll(x, i, axis=2) for i in range(before, 0, -1)] + [x]
  return jnp.concatenate(parts, axis=3)


def chunk_attention(q: Array, k: Array, v: Array, pos: Array, seg: Array,
                    *, chunk: int, before: int, self_masked: bool,
                    dropout: Callable[[Array], Array] | None = None,
                    dtype: str = "float32") -> tuple[Array, Array]:
  """Causal attention of chunks of C slots over themselves and `before`
  preceding chunks.

  Args:
    q: [B, N, M, H] queries (M a multiple of C), already scaled.
    k, v: [B, N, M, H] keys and values, in the same slot order.
    pos: [B, N|1, M] int row position of each slot (causality, self).
    seg: [B, N|1, M] int document of each slot, 0 = padding.
    chunk: C.
    before: preceding chunks read.
    self_masked: a query reads its own position only when nothing else is
      visible (LSH attention).
    dropout: applied to the probabilities, or None.
    dtype: compute dtype name of the two matmuls.

  Returns:
    (out [B, N, M, H] float32, lse [B, N, M] float32: each query's
    log-sum-exp of its logits).
  """
  b, n, m, h = q.shape
  split = lambda x: x.reshape(x.shape[:2] + (m // chunk, chunk)
                              + x.shape[3:])
  cdtype = layers.compute_dtype(dtype)
  logits = layers.einsum("bnuch,bnush->bnucs", split(q),
                         look_back(split(k), before), cdtype)
  pos_q, pos_k = split(pos)[..., :, None], look_back(split(pos), before)
  seg_q, seg_k = split(seg)[..., :, None], look_back(split(seg), before)
  pos_k, seg_k = pos_k[..., None, :], seg_k[..., None, :]
  ok = (seg_q == seg_k) & (seg_k != 0) & (pos_k <= pos_q)
  logits = jnp.where(ok, logits, MASK_VALUE)
  if self_masked:
    logits = jnp.where(pos_q == pos_k, SELF_VALUE, logits)
  lse = jax.nn.logsumexp(logits, axis=-1)
  probs = jnp.exp(logits - lse[..., None])
  probs = probs if dropout is None else dropout(probs)
  out = layers.einsum("bnucs,bnush->bnuch", probs,
                      look_back(split(v), before), cdtype)
  return out.reshape(b, n, m, h), lse.reshape(b, n, m)


def _heads_first(x: Array) -> Array:
  return jnp.swapaxes(x, 1, 2)  # [B, T, N, H] <-> [B, N, T, H]


def local_attention(q: Array, k: Array, v: Array, segments: Array, *,
                    chunk: int, before: int, dropout=None,
                    dtype: str = "float32") -> Array:
  """Causal attention within chunks of consecutive positions.

  Args:
    q, k, v: [B, T, N, H]; q and k unscaled (k is scaled by 1/sqrt(H)).
    segments: [B, T] int, 0 = padding.
    chunk: C; T must be a multiple of it, or at most C (one chunk).
    before: preceding chunks each chunk reads.
    dropout: on the probabilities, or None.
    dtype: compute dtype name.

  Returns:
    [B, T, N, H] float32.
  """
  t = q.shape[1]
  if t <= chunk:
    chunk, before = t, 0
  pos = jnp.arange(t, dtype=jnp.int32)[None, None]
  out, _ = chunk_attention(
      _heads_first(q), _heads_first(k) * q.shape[-1] ** -0.5,
      _heads_first(v), pos, segments[:, None], chunk=chunk, before=before,
      self_masked=False, dropout=dropout, dtype=dtype)
  return _heads_first(out)


def unit_rms(x: Array, eps: float = 1e-6) -> Array:
  """x / RMS(x) over the last axis (the reference's key normalisation)."""
  return x * jax.lax.rsqrt(jnp.mean(jnp.square(x), -1, keepdims=True) + eps)


def lsh_attention(qk: Array, v: Array, segments: Array, rotations: Array,
                  *, chunk: int, before: int, num_buckets, dropout=None,
                  dtype: str = "float32") -> Array:
  """Causal LSH attention with shared queries and keys.

  Args:
    qk: [B, T, N, H] shared query/key projections.
    v: [B, T, N, H] values.
    segments: [B, T] int, 0 = padding.
    rotations: [N, H, R, K/2] (`rotation_shape`); R = hash rounds.
    chunk: C; T must be a multiple of it, or at most C (dense, no hashing).
    before: preceding chunks (of the sorted order) each chunk reads.
    num_buckets: an even int or a tuple of even factors.
    dropout: on the probabilities, or None.
    dtype: compute dtype name.

  Returns:
    [B, T, N, H] float32.
  """
  b, t, n, h = qk.shape
  qk, v = _heads_first(qk), _heads_first(v)
  keys = unit_rms(qk) * h ** -0.5
  if t <= chunk:
    pos = jnp.arange(t, dtype=jnp.int32)[None, None]
    out, _ = chunk_attention(qk, keys, v, pos, segments[:, None], chunk=t,
                             before=0, self_masked=True, dropout=dropout,
                             dtype=dtype)
    return _heads_first(out)
  rounds = rotations.shape[2]
  buckets = hash_buckets(qk, rotations, num_buckets, segments != 0)
  order = jnp.argsort(buckets.reshape(b, n, rounds * t), axis=-1,
                      stable=True)  # by (round, bucket, position)
  pos = (order % t).astype(jnp.int32)  # [B, N, M]
  gather = lambda x: jnp.take_along_axis(x, pos[..., None], axis=2)
  seg = jnp.take_along_axis(segments[:, None], pos, axis=2)
  out, lse = chunk_attention(gather(qk), gather(keys), gather(v), pos, seg,
                             chunk=chunk, before=before, self_masked=True,
                             dropout=dropout, dtype=dtype)
  undo = jnp.argsort(order, axis=-1)
  out = jnp.take_along_axis(out, undo[..., None], axis=2)
  lse = jnp.take_along_axis(lse, undo, axis=2).reshape(b, n, rounds, t)
  # exp(lse - logsumexp(lse)) as the reference computes it, not a softmax:
  # where every round saw only the query itself (lse ~ -1e5, float32 ulp
  # 0.008) its weights then sum to 1 only to ~1e-3, and parity needs that.
  weights = jnp.exp(lse - jax.nn.logsumexp(lse, axis=2, keepdims=True))
  weights = weights[..., None]
  out = (out.reshape(b, n, rounds, t, h) * weights).sum(axis=2)
  return _heads_first(out)


def padded_length(length: int, chunks: tuple[int, ...]) -> int:
  """The row length the chunked layers run at (the reference's rule): a
  row longer than the shortest chunk is padded to a multiple of the least
  common multiple of the chunk lengths."""
  lcm = int(np.lcm.reduce(np.asarray(chunks, np.int64)))
  if length <= min(chunks) or length % lcm == 0:
    return length
  return length + lcm - length % lcm
