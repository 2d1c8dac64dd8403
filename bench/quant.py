"""Q8BERT int8 inference against float32: time, and what quantisation costs.

    python bench/quant.py [--size small] [--batch 8] [--length 128]
        [--steps 5] [--warmup 2]

A BERT of `--size` (random init, no dropout) is calibrated on one batch of
random ids (`zoo.compress.quant`: one fake-quantised apply with mutable
"quant_stats"), exported with `quant.quantize_params`, and run three ways
on another batch: float32, fake-quantised (float matmuls on the int8
grid), and int8 (`jax.lax.dot_general` s8 x s8 -> s32, rescaled). The
encoder forward (`return_logits=False`, what a classifier runs) of float32
and int8 is timed in alternating turns (`_common.interleaved_medians`);
the MLM logits of all three give the accuracy gap (max |diff|, argmax
agreement). The compiled int8 program is read for the element types of
its dots, to show whether XLA kept them in integers.

The last line prints the time ratio float32 / int8 (above 1: int8 is
faster) and the gaps.
"""

import argparse
import re
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

import _common  # pylint: disable=g-bad-import-order
from zoo import models
from zoo.compress import quant

_DOT = re.compile(r"= (\w+)\[[^\]]*\]\S* dot\((\S+), ")


def parse_args(argv):
  """The command line."""
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--size", default="small")
  p.add_argument("--batch", type=int, default=8)
  p.add_argument("--length", type=int, default=128)
  p.add_argument("--steps", type=int, default=5)
  p.add_argument("--warmup", type=int, default=2)
  return p.parse_args(argv)


def dot_types(hlo_text: str) -> dict[str, int]:
  """How many dots of a compiled program's HLO text produce each element
  type ("s32": integer dots, "f32": float ones)."""
  counts = {}
  for result, _ in _DOT.findall(hlo_text):
    counts[result] = counts.get(result, 0) + 1
  return counts


def setup(args) -> dict:
  """Model, float params, stats, int8 variables and two batches of ids."""
  config, model = models.make("bert", args.size, dropout_rate=0.0,
                              attention_dropout_rate=0.0)
  rng = np.random.default_rng(0)
  ids = lambda: jnp.asarray(rng.integers(  # pylint: disable=g-long-lambda
      1000, config.vocab_size, (args.batch, args.length)), jnp.int32)
  calib, tokens = ids(), ids()
  params = nn.meta.unbox(
      jax.jit(model.init)(jax.random.key(0), calib[:1])["params"])
  stats = jax.jit(quant.qat(lambda p, x: model.apply(
      {"params": p}, x, mutable=[quant.STATS])[1][quant.STATS]))(
          params, calib)
  return {"model": model, "params": params, "stats": stats,
          "qvars": quant.quantize_params(params, stats), "tokens": tokens}


def forwards(run: dict, logits: bool) -> dict:
  """Jitted `(variables, tokens) -> output` of float32, fake and int8."""
  model = run["model"]
  key = "logits" if logits else "hidden"
  make = lambda apply: jax.jit(  # pylint: disable=g-long-lambda
      lambda v, x: apply(v, x, return_logits=logits)[key])
  return {"float32": (make(model.apply), {"params": run["params"]}),
          "fake": (make(quant.qat(model.apply)),
                   {"params": run["params"], quant.STATS: run["stats"]}),
          "int8": (make(quant.int8(model.apply)), run["qvars"])}


def accuracy(run: dict) -> dict:
  """Max |logit diff| and argmax agreement of fake and int8 vs float32,
  and of int8 vs fake."""
  outs = {name: np.asarray(fn(v, run["tokens"]))
          for name, (fn, v) in forwards(run, logits=True).items()}
  gap = lambda a, b: {  # pylint: disable=g-long-lambda
      "max_abs_diff": float(np.abs(outs[a] - outs[b]).max()),
      "argmax_agree": float((outs[a].argmax(-1) == outs[b].argmax(-1))
                            .mean())}
  return {"fake_vs_float32": gap("fake", "float32"),
          "int8_vs_float32": gap("int8", "float32"),
          "int8_vs_fake": gap("int8", "fake"),
          "max_abs_logit": float(np.abs(outs["float32"]).max())}


def main(argv=None):
  """Times, gaps, dot types: a line each, the JSON record, the ratio."""
  args = parse_args(sys.argv[1:] if argv is None else argv)
  run = setup(args)
  fns = forwards(run, logits=False)
  x = run["tokens"]
  int8_fn, int8_vars = fns["int8"]
  dots = dot_types(int8_fn.lower(int8_vars, x).compile().as_text())
  print(f"int8 program dots by result type: {dots}", flush=True)
  times = _common.interleaved_medians(
      {name: (lambda f=f, v=v: f(v, x).block_until_ready())
       for name, (f, v) in fns.items() if name != "fake"},
      args.steps, args.warmup)
  for name, seconds in times.items():
    print(f"{name:8s} encoder forward {seconds * 1e3:9.1f} ms", flush=True)
  gaps = accuracy(run)
  for name, gap in gaps.items():
    print(f"{name:16s} {gap}", flush=True)
  ratio = times["float32"] / times["int8"]
  _common.emit_json("quant", {
      "machine": _common.machine(), "size": args.size, "batch": args.batch,
      "length": args.length, "seconds": times, "dots": dots,
      "accuracy": gaps})
  print(f"bert-{args.size} B={args.batch} T={args.length}: "
        f"float32/int8 time={ratio:.2f} | "
        f"fake max|dlogit|={gaps['fake_vs_float32']['max_abs_diff']:.4f} "
        f"argmax={gaps['fake_vs_float32']['argmax_agree']:.3f} | "
        f"int8 max|dlogit|={gaps['int8_vs_float32']['max_abs_diff']:.4f} "
        f"argmax={gaps['int8_vs_float32']['argmax_agree']:.3f}")


if __name__ == "__main__":
  main()
