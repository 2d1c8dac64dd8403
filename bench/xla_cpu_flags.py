"""The zoo's tiny training steps under XLA CPU options or environments, in turns.

    python bench/xla_cpu_flags.py [--models bert-base,gpt2-small,t5-small]
        [--size tiny] [--batch 32] [--seq_len 128] [--vocab N] [--steps 9]
        [--variants "default;--xla_cpu_experimental_ynn_fusion_type=-reduce"]

Each variant is a set of `XLA_FLAGS` (`--name=value` words), environment
variables (`NAME=value` words, e.g. `ZOO_HOST_MALLOC=0`) and model Config
overrides (`model.NAME=value` words, e.g. `model.relpos_from=positions`;
the value is read as a Python literal, else kept as a string), given to
its own worker process before it imports jax and the zoo; the workers
build the same step
(`_zoo.prepare_step`: the one trainer's jitted, donated step) and take
turns (`_common.interleaved_medians`), so the host's drift falls on every
variant alike. The last line prints each variant's step time relative to
the first variant, per model: below 1 is faster.
"""

import argparse
import ast
import sys

import _common  # pylint: disable=g-bad-import-order
import _workers  # pylint: disable=g-bad-import-order
import _zoo  # pylint: disable=g-bad-import-order

VARIANTS = ("default", "--xla_cpu_experimental_ynn_fusion_type=-reduce",
            "--xla_cpu_experimental_ynn_fusion_type=dot")


def parse_args(argv):
  """The command line."""
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--models", default="bert-base,gpt2-small,t5-small")
  p.add_argument("--size", default="tiny")
  p.add_argument("--batch", type=int, default=32)
  p.add_argument("--seq_len", type=int, default=128)
  p.add_argument("--vocab", type=int, default=None,
                 help="vocabulary size (default: 512 at tiny, else the "
                 "reference's; the demo grid's is 4000)")
  p.add_argument("--steps", type=int, default=9)
  p.add_argument("--warmup", type=int, default=2)
  p.add_argument("--variants", default=";".join(VARIANTS),
                 help="';'-separated XLA_FLAGS sets; 'default' = none")
  args = p.parse_args(argv)
  args.models = [m for m in args.models.split(",") if m]
  args.variants = [v.strip() for v in args.variants.split(";") if v.strip()]
  unknown = sorted(set(args.models) - set(_zoo.SPECS))
  if unknown:
    p.error(f"unknown models {unknown}; known: {sorted(_zoo.SPECS)}")
  return args


def variant(flags: str) -> tuple[str, dict[str, str], dict]:
  """`(XLA_FLAGS, environment, model Config overrides)` of one variant."""
  words = [] if flags == "default" else flags.split()
  bad = [w for w in words if not w.startswith("--") and "=" not in w]
  if bad:
    raise ValueError(f"variant words {bad} are neither --flags nor "
                     "NAME=value")
  xla = " ".join(w for w in words if w.startswith("--"))
  pairs = [w.split("=", 1) for w in words if not w.startswith("--")]
  env = {k: v for k, v in pairs if not k.startswith("model.")}
  model = {k[len("model."):]: _literal(v) for k, v in pairs
           if k.startswith("model.")}
  return xla, env, model


def _literal(text: str):
  try:
    return ast.literal_eval(text)
  except (ValueError, SyntaxError):
    return text


def run_model(name: str, args) -> dict[str, float]:
  """Median step seconds of `name` under each variant, timed in turns."""
  spec = {"name": name, "batch": args.batch, "seq_len": args.seq_len,
          "size": args.size, "dtype": "float32", "model_args": {},
          "vocab_size": args.vocab}
  workers = []
  try:
    for flags in args.variants:
      xla, env, model = variant(flags)
      workers.append(_workers.Worker(
          "zoo", dict(spec, xla_flags=xla, env=env, model_args=model),
          args.warmup, label=flags))
    return _common.interleaved_medians(_workers.steppers(workers),
                                       args.steps, 0)
  finally:
    for w in workers:
      w.close()


def main(argv=None):
  """Prints each model's step times and, last, the ratios to variant 0."""
  args = parse_args(sys.argv[1:] if argv is None else argv)
  print(f"machine {_common.machine()}", flush=True)
  parts = []
  for name in args.models:
    seconds = run_model(name, args)
    base = seconds[args.variants[0]]
    for flags, s in seconds.items():
      print(f"{name:11s} {s * 1e3:8.1f} ms  x{s / base:.3f}  {flags}",
            flush=True)
    parts.append(f"{name} " + " ".join(
        f"v{i}={seconds[f] / base:.3f}" for i, f in enumerate(args.variants)))
  print(" | ".join(parts))


if __name__ == "__main__":
  main()
