"""Fused self-attention on TPU: the Pallas splash-attention kernel.

The kernel never forms the [B, N, T, T] logits: it walks [block, block]
tiles of queries and keys and skips the tiles its mask rules out. It reads
the mask as structure, not as a dense array: document (segment) ids of the
packed rows, and causal or not (`masks.Segmented`). Attention within a
document is full (encoders) or causal (decoders); a prefix-LM mask, an
additive bias (T5's relative positions) or attention dropout have no such
form, so they stay on the einsum path (`layers.attention` decides).

Inside a sharded step the kernel runs per device on its own rows and heads
(`sharding.per_device`: a Pallas kernel is not partitioned by XLA), with
the whole length. Off TPU the same kernel runs in Pallas's interpret mode,
for the numerics tests.

Letters: B batch, T length, N heads, H head width.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu.splash_attention import (
    splash_attention_kernel as kernel_lib)
from jax.experimental.pallas.ops.tpu.splash_attention import (
    splash_attention_mask as mask_lib)

from zoo import sharding

# Tile edge: TPU tiles are 128 lanes wide; longer rows use 512-wide tiles.
BLOCK = 128


def platform() -> str:
  """The platform the traced program runs on: the active mesh's devices
  (a TPU topology when `zoo.plan` compiles for one), else jax's backend."""
  mesh = jax.sharding.get_abstract_mesh()
  device = None if mesh.empty else getattr(mesh, "abstract_device", None)
  return device.platform if device is not None else jax.default_backend()


def auto_impl(bf16: bool, fits: bool) -> str:
  """The attention kernel "auto" means where the program will run: splash
  on TPU where it `applies`, cuDNN on GPU in bfloat16, else einsum."""
  target = platform()
  if target == "tpu" and fits:
    return "splash"
  return "cudnn" if target == "gpu" and bf16 else "einsum"


def applies(q_length: int, k_length: int, segmented, bias, dropout) -> bool:
  """Whether the kernel computes this attention exactly."""
  return (segmented is not None and bias is None and dropout is None
          and q_length == k_length and q_length % BLOCK == 0)


def _block(length: int) -> int:
  return 512 if length % 512 == 0 else BLOCK


@functools.lru_cache(maxsize=64)
def _kernel(heads: int, length: int, causal: bool, interpret: bool):
  base = (mask_lib.CausalMask((length, length)) if causal
          else mask_lib.FullMask((length, length)))
  b = _block(length)
  sizes = kernel_lib.BlockSizes(block_q=b, block_kv=b, block_q_dkv=b,
                                block_kv_dkv=b, block_q_dq=b, block_kv_dq=b)
  return kernel_lib.make_splash_mha(
      mask_lib.MultiHeadMask([base] * heads), block_sizes=sizes,
      head_shards=1, q_seq_shards=1, interpret=interpret)


def _local(q, k, v, segments, *, scale, causal, interpret):
  """Splash attention of one device's rows: [b, T, n, H] -> [b, T, n, H]."""
  kern = _kernel(q.shape[2], q.shape[1], causal, interpret)

  def one(qi, ki, vi, si):  # [T, n, H] -> [n, T, H], as the kernel reads
    ids = kernel_lib.SegmentIds(q=si, kv=si)
    out = kern((qi * scale).transpose(1, 0, 2), ki.transpose(1, 0, 2),
               vi.transpose(1, 0, 2), segment_ids=ids)
    return out.transpose(1, 0, 2)

  return jax.vmap(one)(q, k, v, segments)


def attention(q, k, v, segmented, scale: float, dtype) -> jax.Array:
  """Self-attention within documents, fused.

  Args:
    q, k, v: [B, T, N, H].
    segmented: `masks.Segmented` (its segments [B, T] and `causal`).
    scale: logit scale.
    dtype: compute dtype of q, k, v.

  Returns:
    [B, T, N, H] float32. Rows of padding (segment 0) attend to padding
    here, where the dense mask gives them nothing: their outputs differ,
    and nothing reads them.
  """
  fn = functools.partial(_local, scale=scale, causal=segmented.causal,
                         interpret=platform() != "tpu")
  args = (q.astype(dtype), k.astype(dtype), v.astype(dtype),
          segmented.segments.astype(jnp.int32))
  qkv = sharding.ATTENTION_QKV
  out = sharding.per_device(fn, args, (qkv, qkv, qkv, ("batch", None)), qkv)
  return out.astype(jnp.float32)
