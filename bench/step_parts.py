"""Where a training step's time goes: forward, backward, the update.

    python bench/step_parts.py [--models bert-base,gpt2-small,t5-small]
        [--size tiny] [--batch 32] [--seq_len 128] [--steps 15] [--rounds 3]

For each model, the one trainer's step (`_zoo.prepare_step`'s run) and two
programs cut from it, all compiled first and then timed in turns (median
of `--steps` runs per round, median over rounds):
- `forward`: the objective's loss with dropout (corruption included);
- `gradient`: its loss and gradient (`jax.value_and_grad`);
- `step`: the whole donated step (gradient, non-finite guard, AdamW,
  metrics).
`gradient - forward` is the backward pass, `step - gradient` the update
and everything the step adds. The last line gives each part's share of
the step per model.
"""

import argparse
import statistics
import sys

import jax

import _common  # pylint: disable=g-bad-import-order
import _zoo  # pylint: disable=g-bad-import-order


def programs(name: str, size: str, batch: int, seq_len: int) -> dict:
  """{"forward", "gradient", "step"}: callables that run once and block."""
  run = _zoo.build(_zoo.make_config(name, "float32", batch, seq_len, size))
  obj, rows, rng = run["objective"], run["batch"], jax.random.key(0)
  holder = {"state": run["state"]}
  forward = jax.jit(lambda p, b: obj.loss(p, b, rng)[0])
  gradient = jax.jit(jax.value_and_grad(lambda p, b: obj.loss(p, b, rng)[0]))

  def step():
    holder["state"], metrics = run["step"](holder["state"], rows)
    jax.block_until_ready(metrics)

  params = lambda: holder["state"]["params"]
  return {
      "forward": lambda: jax.block_until_ready(forward(params(), rows)),
      "gradient": lambda: jax.block_until_ready(gradient(params(), rows)),
      "step": step}


def measure(fns: dict, steps: int, rounds: int) -> dict[str, float]:
  """Median seconds of each program, the programs taking turns."""
  for fn in fns.values():
    _common.median_seconds(fn, 1, warmup=2)
  out = {k: [] for k in fns}
  for _ in range(rounds):
    for key, fn in fns.items():
      out[key].append(_common.median_seconds(fn, steps, warmup=1))
  return {k: statistics.median(v) for k, v in out.items()}


def shares(s: dict[str, float]) -> dict[str, float]:
  """Forward, backward and update as fractions of the step."""
  return {"forward": s["forward"] / s["step"],
          "backward": (s["gradient"] - s["forward"]) / s["step"],
          "update": (s["step"] - s["gradient"]) / s["step"]}


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--models", default="bert-base,gpt2-small,t5-small")
  p.add_argument("--size", default="tiny")
  p.add_argument("--batch", type=int, default=32)
  p.add_argument("--seq_len", type=int, default=128)
  p.add_argument("--steps", type=int, default=15)
  p.add_argument("--rounds", type=int, default=3)
  args = p.parse_args(argv)
  print(f"machine {_common.machine()}", flush=True)
  line = []
  for name in args.models.split(","):
    seconds = measure(programs(name, args.size, args.batch, args.seq_len),
                      args.steps, args.rounds)
    print(f"{name} {args.size}: " + ", ".join(
        f"{k} {v * 1e3:.1f} ms" for k, v in seconds.items()), flush=True)
    line.append(f"{name} " + " ".join(
        f"{k}={v:.2f}" for k, v in shares(seconds).items()))
  print(" | ".join(line))


if __name__ == "__main__":
  main(sys.argv[1:])
