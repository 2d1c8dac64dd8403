"""Training-step memory against depth: reversible against standard layers.

    python bench/depth.py [--depths 4,8,16,32] [--seq_len 4096] [--batch 1]

Compiles the gradient of a Reformer LM's next-token loss (the released
crime-and-punishment shape, `zoo.models.reformer` size "small", layers
scanned) at each depth L, once with reversible layers (the backward pass
recomputes each layer's inputs from its outputs) and once with standard
ones (plain autodiff keeps every layer's activations), and reads XLA's
planned memory of the compiled program: temporaries (activations and
scratch) and the total with arguments and outputs (params and their
gradients grow with L either way). Nothing runs: planned memory is
exact and compiling is the whole cost.

The last line prints the log-log slopes of temporaries against L: about 0
for reversible layers, about 1 for standard ones.
"""

import argparse
import sys

import jax
import jax.numpy as jnp
import numpy as np

import _common  # pylint: disable=g-bad-import-order
from zoo import models


def parse_args(argv):
  """The command line."""
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--depths", default="4,8,16,32")
  p.add_argument("--seq_len", type=int, default=4096)
  p.add_argument("--batch", type=int, default=1)
  args = p.parse_args(argv)
  args.depths = [int(x) for x in args.depths.split(",") if x]
  if len(args.depths) < 2:
    p.error("--depths needs at least two depths for a slope")
  return args


def planned(depth: int, reversible: bool, args) -> dict[str, float]:
  """Temporaries and total bytes of the compiled gradient at `depth`."""
  config, model = models.make("reformer", "small", num_layers=depth,
                              reversible=reversible, scan_layers=True,
                              dropout_rate=0.0, attention_dropout_rate=0.0)
  tokens = jnp.ones((args.batch, args.seq_len), jnp.int32)
  params = jax.eval_shape(model.init, jax.random.key(0), tokens)["params"]

  def loss(p, x):
    logits = model.apply({"params": p}, x)["logits"][:, :-1]
    logp = jax.nn.log_softmax(logits.astype(jnp.float32))
    return -jnp.take_along_axis(logp, x[:, 1:, None], -1).mean()

  compiled = jax.jit(jax.grad(loss)).lower(params, tokens).compile()
  mem = compiled.memory_analysis()
  temp = float(mem.temp_size_in_bytes)
  total = temp + mem.argument_size_in_bytes + mem.output_size_in_bytes
  del config
  return {"temp_bytes": temp, "total_bytes": float(total)}


def slope(xs, ys) -> float:
  """The least-squares slope of log(ys) against log(xs)."""
  return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def main(argv=None):
  """Every (kind, depth): a line each, the JSON record and the slopes."""
  args = parse_args(sys.argv[1:] if argv is None else argv)
  results, slopes = {}, {}
  for kind, reversible in (("reversible", True), ("standard", False)):
    rows = [planned(d, reversible, args) for d in args.depths]
    results[kind] = dict(zip(map(str, args.depths), rows))
    for d, row in zip(args.depths, rows):
      print(f"{kind:10s} L={d:3d} temporaries "
            f"{row['temp_bytes'] / 2**20:9.1f} MiB, total "
            f"{row['total_bytes'] / 2**20:9.1f} MiB", flush=True)
    slopes[kind] = {
        "temp": slope(args.depths, [r["temp_bytes"] for r in rows]),
        "total": slope(args.depths, [r["total_bytes"] for r in rows])}
  _common.emit_json("depth", {
      "machine": _common.machine(), "depths": args.depths,
      "seq_len": args.seq_len, "batch": args.batch, "results": results,
      "slopes": slopes})
  print(" | ".join(f"{kind} temp_slope={s['temp']:.2f} "
                   f"total_slope={s['total']:.2f}"
                   for kind, s in slopes.items()))


if __name__ == "__main__":
  main()
