"""Time and memory of the zoo's attention against sequence length.

    python bench/attention.py [--lengths 512,1024,2048,4096,8192]
        [--impls einsum,xla,window] [--heads 2] [--head_dim 64]
        [--dtype float32] [--backward] [--causal] [--window 512]
        [--impls ...,lsh] [--chunk 64] [--hashes 2] [--buckets 0]

For each kernel (of `zoo.models.layers.attention`, "einsum": the exact
dense path, "xla": `jax.nn.dot_product_attention`; and "window":
Longformer's sliding window of `--window` keys computed in banded blocks,
`zoo.models.longformer.window_attention`; "lsh": Reformer's causal LSH
attention, `--hashes` rounds sorted into chunks of `--chunk` with one
chunk of look-back and 2T/chunk buckets as in the paper, or a fixed
`--buckets`, `zoo.models.lsh.lsh_attention`)
and each length T (=S):
the median seconds of the jitted call and XLA's planned peak memory
(arguments + outputs + temporaries of the compiled program). A log-log
fit gives each kernel's slope in T: 2 for dense attention, 1 for a window.

The last line prints the slopes, e.g.
`einsum time_slope=1.97 mem_slope=2.00 | xla time_slope=1.95 mem_slope=2.00`.
"""

import argparse
import sys

import jax
import jax.numpy as jnp
import numpy as np

import _common  # pylint: disable=g-bad-import-order
from zoo.models import layers
from zoo.models import longformer
from zoo.models import lsh


def parse_args(argv):
  """The command line."""
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--lengths", default="512,1024,2048,4096,8192")
  p.add_argument("--impls", default="einsum,xla")
  p.add_argument("--batch", type=int, default=1)
  p.add_argument("--heads", type=int, default=2)
  p.add_argument("--head_dim", type=int, default=64)
  p.add_argument("--dtype", default="float32")
  p.add_argument("--steps", type=int, default=3)
  p.add_argument("--backward", action="store_true",
                 help="time forward + backward (grad wrt q, k, v)")
  p.add_argument("--causal", action="store_true")
  p.add_argument("--window", type=int, default=512,
                 help="keys of the 'window' kernel (W/2 on each side)")
  p.add_argument("--chunk", type=int, default=64, help="'lsh' chunk length")
  p.add_argument("--hashes", type=int, default=2, help="'lsh' hash rounds")
  p.add_argument("--buckets", type=int, default=0,
                 help="'lsh' buckets; 0: 2T/chunk (the paper's: the hashing "
                 "matmul then grows as T^2)")
  args = p.parse_args(argv)
  args.lengths = [int(x) for x in args.lengths.split(",") if x]
  args.impls = [x for x in args.impls.split(",") if x]
  if len(args.lengths) < 2:
    p.error("--lengths needs at least two lengths for a slope")
  return args


def attention_fn(impl: str, args):
  """`(q, k, v) -> out` (or its grads) of one kernel."""
  dtype, causal, backward = args.dtype, args.causal, args.backward
  def forward(q, k, v):
    if impl == "window":
      if causal:
        raise SystemExit("the 'window' kernel is bidirectional: no --causal")
      ones = jnp.ones(q.shape[:2], jnp.int32)
      return longformer.window_attention(
          q * q.shape[-1] ** -0.5, k, v, ones, ones > 0,
          radius=args.window // 2, dtype=dtype)
    if impl == "lsh":  # shared query/key: q is the projection, k unused
      return _lsh(q, v, args)
    mask = layers.causal_mask(q.shape[1]) if causal else None
    return layers.attention(q, k, v, mask=mask, dtype=dtype, impl=impl)
  if not backward:
    return forward
  return jax.grad(lambda q, k, v: forward(q, k, v).sum(), argnums=(0, 1, 2))


def _lsh(qk, v, args):
  """Reformer's LSH attention of one layer at T = qk.shape[1]."""
  b, t, n, h = qk.shape
  buckets = args.buckets or max(2, 2 * (t // args.chunk))
  rotations = lsh.random_rotations(
      jax.random.key(0), lsh.rotation_shape(n, h, args.hashes, buckets))
  return lsh.lsh_attention(qk, v, jnp.ones((b, t), jnp.int32), rotations,
                           chunk=args.chunk, before=1, num_buckets=buckets,
                           dtype=args.dtype)


def measure(impl: str, length: int, args) -> dict[str, float]:
  """Median seconds and planned peak bytes of one call at T = S = length."""
  shape = (args.batch, length, args.heads, args.head_dim)
  keys = jax.random.split(jax.random.key(length), 3)
  q, k, v = (jax.random.normal(key, shape, jnp.float32) for key in keys)
  fn = attention_fn(impl, args)
  compiled = jax.jit(fn).lower(q, k, v).compile()
  mem = compiled.memory_analysis()
  peak = float(mem.argument_size_in_bytes + mem.output_size_in_bytes
               + mem.temp_size_in_bytes) if mem is not None else float("nan")
  seconds = _common.median_seconds(
      lambda: jax.block_until_ready(compiled(q, k, v)), args.steps, 1)
  return {"seconds": seconds, "peak_bytes": peak}


def slope(lengths, values) -> float:
  """The least-squares slope of log(values) against log(lengths)."""
  return float(np.polyfit(np.log(lengths), np.log(values), 1)[0])


def main(argv=None):
  """Runs every (kernel, length), prints a table, JSON and the slopes."""
  args = parse_args(sys.argv[1:] if argv is None else argv)
  results, slopes = {}, {}
  for impl in args.impls:
    rows = [measure(impl, t, args) for t in args.lengths]
    results[impl] = dict(zip(map(str, args.lengths), rows))
    for t, row in zip(args.lengths, rows):
      print(f"{impl:7s} T={t:5d} {row['seconds'] * 1e3:9.2f} ms "
            f"{row['peak_bytes'] / 2**20:9.1f} MiB", flush=True)
    slopes[impl] = {
        "time": slope(args.lengths, [r["seconds"] for r in rows]),
        "mem": slope(args.lengths, [r["peak_bytes"] for r in rows])}
  _common.emit_json("attention", {
      "machine": _common.machine(), "lengths": args.lengths,
      "batch": args.batch, "heads": args.heads, "head_dim": args.head_dim,
      "dtype": args.dtype, "backward": args.backward, "causal": args.causal,
      "window": args.window, "chunk": args.chunk, "hashes": args.hashes,
      "buckets": args.buckets,
      "results": results, "slopes": slopes})
  print(" | ".join(f"{impl} time_slope={s['time']:.2f} "
                   f"mem_slope={s['mem']:.2f}" for impl, s in slopes.items()))


if __name__ == "__main__":
  main()
