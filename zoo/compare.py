"""The comparison harness's CLI: what does each pre-training scheme buy,
at equal budget, over its own family's random init?

    python -m zoo.compare --config configs/compare/demo.py --workdir DIR

Each cell of the grid (objective x model family x size) is pre-trained by
the one trainer on the same rows for the same token budget into
`DIR/cells/<cell>/`; every family also gets a random-init row. Each row is
then read three ways, the same for every family: zero-shot minimal pairs
scored by likelihood, a frozen linear probe, and few-shot fine-tuning
(`zoo.harness` documents the grid, the views and the statistics). The run
ends with `DIR/results.{md,csv,json}`, `DIR/losses.png`, `DIR/views.png`
and `DIR/finetuning.png`, and prints the table. Rerunning the command
resumes: finished work is read back, a killed cell continues from its
checkpoint. Compiled programs are kept on disk (`--compile_cache`, on by
default; `zoo.compile_cache`), so a rerun also skips most compiling.

On a pod, start one process per host as for `zoo.train`
(`--coordinator_address --num_processes --process_id`, or nothing where
JAX detects the cluster): cells pre-train across all processes, the views
are dealt out among them, and process 0 writes the results into the one
shared workdir.
"""

import os
import sys

import jax
from absl import app, flags, logging

from zoo import compile_cache
from zoo import distributed
from zoo import train  # defines --config, --workdir, --compile_cache
from zoo.harness import run as harness

_MULTI_HOST = ("coordinator_address", "num_processes", "process_id")
_WORKERS = flags.DEFINE_integer(
    "workers", 1, "Run the cells in this many CPU processes side by side, "
    "each pinned to its share of the cores (zoo.harness.parallel); 1: all "
    "in this process.")
_CLAIMS = flags.DEFINE_string(
    "claims", None, "Internal: the claims folder of a harness worker.")


def main(argv) -> None:
  """The CLI: runs the grid, then prints results.md.

  `--config` (a grid file, path[:arg]) and `--workdir` are the flags
  `zoo.train` defines, imported with it; they mean the same here.
  """
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments {argv[1:]}")
  grid, workdir = flags.FLAGS.config, flags.FLAGS.workdir
  if grid is None or workdir is None:
    raise app.UsageError("--config and --workdir are required")
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)  # Orbax logs each save at INFO
  if train.COMPILE_CACHE.value:
    compile_cache.enable()
  multi_host = [flags.FLAGS[name].value for name in _MULTI_HOST]
  if _CLAIMS.value:
    harness.work(grid, workdir, _CLAIMS.value)
    return
  distributed.initialize(*multi_host)
  if _WORKERS.value > 1 and (jax.process_count() > 1 or
                             jax.default_backend() != "cpu"):
    raise app.UsageError(
        f"--workers {_WORKERS.value} runs cells in CPU processes of one "
        f"machine; this run has {jax.process_count()} process(es) on "
        f"{jax.default_backend()} (use --workers 1, or JAX_PLATFORMS=cpu)")
  harness.run(grid, workdir, _WORKERS.value, sys.argv)
  if not distributed.is_main():
    return
  with open(os.path.join(workdir, "results.md"), encoding="utf-8") as f:
    print(f.read())


if __name__ == "__main__":
  app.run(main)
