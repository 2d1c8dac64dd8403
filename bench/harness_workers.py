"""Steps per second: one process on every core, or one pinned per share.

    python bench/harness_workers.py [--models bert-base,gpt2-small,t5-small]
        [--size tiny] [--batch 32] [--seq_len 128] [--steps 15]
        [--workers 2] [--rounds 2]

What `zoo.compare --workers N` (`zoo.harness.parallel`) relies on. For each
model, in turns: (a) one process with every core runs the zoo's training
step (`_zoo.prepare_step`); (b) N processes, each pinned to its share of
the cores (`parallel.cpu_shares`), run it at the same time. Each reports
its median step time after warm-up. The last line gives, per model, the
steps per second of (b), all workers together, over those of (a): above 1,
cells side by side get through more work.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def worker(name: str, size: str, batch: int, seq_len: int,
           steps: int) -> float:
  """Median step seconds of `name` in this process."""
  sys.path[:0] = [HERE, REPO]
  import _common  # pylint: disable=import-outside-toplevel
  import _zoo  # pylint: disable=import-outside-toplevel
  fn, _, _ = _zoo.prepare_step(name, "float32", batch, seq_len, size=size)
  return _common.median_seconds(fn, steps, warmup=3)


def _spawn(args, name: str, cpus=None) -> subprocess.Popen:
  cmd = [sys.executable, __file__, "--worker", name, "--size", args.size,
         "--batch", str(args.batch), "--seq_len", str(args.seq_len),
         "--steps", str(args.steps)]
  pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
  return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, text=True,
                          preexec_fn=pin)


def _seconds(proc: subprocess.Popen) -> float:
  out, _ = proc.communicate()
  if proc.returncode:
    raise RuntimeError(f"worker failed (exit {proc.returncode})")
  return float(out.strip().splitlines()[-1])


def measure(args, name: str) -> dict:
  """{"one": [s], "side": [[s per worker]]} over the rounds, in turns."""
  sys.path.insert(0, REPO)
  from zoo.harness import parallel  # pylint: disable=import-outside-toplevel
  shares = parallel.cpu_shares(args.workers)
  out = {"one": [], "side": []}
  for _ in range(args.rounds):
    out["one"].append(_seconds(_spawn(args, name)))
    procs = [_spawn(args, name, cpus) for cpus in shares]
    out["side"].append([_seconds(p) for p in procs])
  return out


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--models", default="bert-base,gpt2-small,t5-small")
  p.add_argument("--size", default="tiny")
  p.add_argument("--batch", type=int, default=32)
  p.add_argument("--seq_len", type=int, default=128)
  p.add_argument("--steps", type=int, default=15)
  p.add_argument("--workers", type=int, default=2)
  p.add_argument("--rounds", type=int, default=2)
  p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  if args.worker:
    print(worker(args.worker, args.size, args.batch, args.seq_len,
                 args.steps))
    return
  ratios = {}
  for name in [m for m in args.models.split(",") if m]:
    got = measure(args, name)
    one = statistics.median(got["one"])
    side = statistics.median(sum(1 / s for s in r) for r in got["side"])
    ratios[name] = round(side * one, 3)
    print(json.dumps({"model": name, "one_process_ms": 1e3 * one,
                      "pinned_ms": [[1e3 * s for s in r]
                                    for r in got["side"]],
                      "throughput_ratio": ratios[name]}), flush=True)
  print(f"{args.workers} pinned workers / one process, steps per second: "
        + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))


if __name__ == "__main__":
  main()
