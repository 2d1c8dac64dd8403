"""Cells side by side: `zoo.compare --workers N` on one CPU machine.

    python -m zoo.compare --config configs/compare/demo.py --workdir DIR \
        --workers 2

A tiny model's step does not keep two cores busy (its ops are too small to
split well), so on a CPU machine N worker processes, each pinned to its
own share of the cores, get through more cells per minute than one
process using all of them (`bench/harness_workers.py` measures the steps;
the README's "--workers" gives what it buys the demo grid). The
parent process splits the cores into N shares and starts N workers; each
worker claims the next unclaimed cell (an atomic file in
`DIR/workers/claims`), pre-trains it and computes its views, writing them
where `zoo.harness.run` would, until no cell is left. Cells that read
another cell (a `source`, an "@cell" teacher) wait until that cell has
pre-trained (a worker runs them then). The parent then runs the usual
`run` with every core: it reads back what the workers stored, runs what
remains, the floors and the report. A worker writes its log to
`DIR/workers/<i>.log`.

Workers share nothing but files: no collective runs between them, and a
cell's numbers are those of a one-process run on that share of the cores.
The "Time spent" line then sums the workers' stage times, which run side
by side, so it exceeds the wall time.
"""

import os
import shutil
import subprocess
import sys
import time

from tqdm import tqdm

from zoo.harness import cells as cells_lib
from zoo.harness import compressed
from zoo.harness import seeds as seeds_lib

CLAIMS = "claims"
DONE = ".done"


def cpu_shares(count: int) -> list[list[int]]:
  """This process's CPUs split into `count` contiguous shares."""
  cpus = sorted(os.sched_getaffinity(0))
  if not 1 <= count <= len(cpus):
    raise ValueError(f"--workers {count}: this machine gives the process "
                     f"{len(cpus)} CPUs; use 1 to {len(cpus)} workers")
  size, extra = divmod(len(cpus), count)
  out, start = [], 0
  for i in range(count):
    end = start + size + (i < extra)
    out.append(cpus[start:end])
    start = end
  return out


def ready(cell, folder: str) -> bool:
  """Whether a worker may run `cell` now: every cell it reads (a teacher,
  a `source`) has finished pre-training in `folder`."""
  return all(os.path.exists(os.path.join(folder, ref, "pretrain.json"))
             for ref in compressed.refs(cell))


def claim(folder: str, key: str) -> bool:
  """True for exactly one of the processes that claim `key`."""
  try:
    os.close(os.open(os.path.join(folder, key),
                     os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    return True
  except FileExistsError:
    return False


def work(grid, workdir: str, claims: str, run_cell, make_inputs,
         poll: float = 10.0) -> int:
  """A worker's loop: claims and runs the cells that are ready until none
  is left, waiting while a cell waits on one another worker runs.

  Returns:
    How many cells this worker ran.
  """
  inputs, done = None, 0
  while True:
    ran, waits = 0, False
    for seed, replica, folder in seeds_lib.replicas(grid, workdir):
      for cell in cells_lib.check_grid(replica):
        key = f"{seed}-{cell.name}"
        if os.path.exists(os.path.join(claims, key)):
          continue
        if not ready(cell, folder):
          waits |= _running(claims, seed, compressed.refs(cell))
          continue
        if not claim(claims, key):
          continue
        inputs = inputs or make_inputs()
        print(f"worker {os.getpid()}: {cell.name} (seed {seed})",
              file=sys.stderr, flush=True)
        run_cell(replica, cell, os.path.join(folder, cell.name), inputs,
                 lambda _: None)
        claim(claims, f"{key}{DONE}")
        ran += 1
    done += ran
    if not ran and not waits:
      return done
    if not ran:
      time.sleep(poll)


def _running(claims: str, seed: int, names: list[str]) -> bool:
  """Whether workers hold every cell of `names` and one is not done yet
  (a cell waiting on them may become ready; a done one that left no
  pre-training, a random-init `source`, never will: the parent runs it)."""
  held = lambda suffix: all(os.path.exists(
      os.path.join(claims, f"{seed}-{n}{suffix}")) for n in names)
  return held("") and not held(DONE)


def worker_command(argv: list[str], claims: str) -> list[str]:
  """A worker's command line: this one, as one worker of `claims`."""
  return [sys.executable, "-m", "zoo.compare", *argv[1:], "--workers=1",
          f"--claims={claims}"]


def pinned(command: list[str], cpus: list[int]) -> list[str]:
  """`command` run on `cpus` only: a fresh interpreter pins itself, then
  becomes `command` (the mask survives `exec`). No Python code runs in a
  fork of this process, whose JAX threads a fork would not carry."""
  pin = ("import os, sys; os.sched_setaffinity(0, %r); "
         "os.execv(sys.argv[1], sys.argv[1:])" % (sorted(cpus),))
  return [sys.executable, "-c", pin, *command]


def _start(command: list[str], cpus: list[int], log: str):
  out = open(log, "w", encoding="utf-8")  # pylint: disable=consider-using-with
  try:
    return subprocess.Popen(pinned(command, cpus), stdout=out,
                            stderr=subprocess.STDOUT)
  finally:
    out.close()


def run_workers(argv: list[str], workdir: str, count: int,
                units: int) -> float:
  """Runs `count` pinned workers to the end, a bar counting the `units`
  (cells of every seed) they finish; returns their wall seconds.

  Raises:
    RuntimeError: a worker failed (the others are stopped); its log says
      why.
  """
  folder = os.path.join(workdir, "workers")
  claims = os.path.join(folder, CLAIMS)
  shutil.rmtree(claims, ignore_errors=True)
  os.makedirs(claims)
  start = time.time()
  procs = [_start(worker_command(argv, claims), cpus,
                  os.path.join(folder, f"{i}.log"))
           for i, cpus in enumerate(cpu_shares(count))]
  bar = tqdm(total=units, desc=f"cells ({count} workers)", file=sys.stderr,
             dynamic_ncols=True)
  try:
    while any(p.poll() is None for p in procs):
      _check(procs, folder)
      bar.update(_finished(claims) - bar.n)
      time.sleep(1.0)
    _check(procs, folder)
    bar.update(_finished(claims) - bar.n)
  finally:
    bar.close()
    for proc in procs:
      if proc.poll() is None:
        proc.kill()
        proc.wait()
  return time.time() - start


def _finished(claims: str) -> int:
  return sum(name.endswith(DONE) for name in os.listdir(claims))


def _check(procs, folder: str) -> None:
  for i, proc in enumerate(procs):
    if proc.poll() not in (None, 0):
      raise RuntimeError(
          f"harness worker {i} failed (exit {proc.returncode}); see "
          f"{os.path.join(folder, f'{i}.log')}")
