"""The comparison harness: which pre-training scheme is better, at equal
budget, on these tasks?

    python -m zoo.compare --config configs/compare/demo.py --workdir DIR

Each cell of the grid (objective x model family x size) is pre-trained by
the one trainer on the same rows for the same token budget into
`DIR/cells/<cell>/`, then fine-tuned with one recipe on every task and seed
(`zoo.compare_lib` documents the grid and the cell directories). The run
ends with `DIR/results.{md,csv,json}`, `DIR/losses.png` and
`DIR/tasks.png`, and prints the table. Rerunning the command resumes: done
cells are read back, a killed cell continues from its checkpoint.
"""

import os
import sys

from absl import app, flags, logging
from tqdm import tqdm

from zoo import compare_lib, plots, report


def _task_metrics(grid) -> dict[str, str]:
  """Task -> the metric name its column reports."""
  import data.tasks  # pylint: disable=import-outside-toplevel
  out = {}
  for name in grid.tasks:
    task = data.tasks.load(name)
    out[name] = {"squad": "f1", "rouge": "rougeL",
                 "pearson_spearman": "pearson/spearman"}.get(
                     task.metric, task.metric)
  return out


def run(grid, workdir: str) -> list[dict]:
  """Runs (or resumes) every cell, then writes tables and plots.

  Args:
    grid: a grid ConfigDict (see `zoo.compare_lib`).
    workdir: DIR; cells go to DIR/cells/<name>/.

  Returns:
    The summarized rows (`zoo.report.summarize`), in grid order.
  """
  cells = compare_lib.check_grid(grid)
  os.makedirs(os.path.join(workdir, "cells"), exist_ok=True)
  runs = len(grid.tasks) * len(grid.seeds)
  bar = tqdm(total=len(cells) * (runs + 1), desc="cells", position=0,
             dynamic_ncols=True, file=sys.stderr)
  results = []
  for cell in cells:
    bar.set_postfix_str(f"{cell.name}: pre-training")
    on_run = lambda label, c=cell: (bar.update(1), bar.set_postfix_str(
        f"{c.name}: fine-tuned {label}"))
    done_before = bar.n
    res = compare_lib.run_cell(grid, cell, os.path.join(
        workdir, "cells", cell.name), on_run=on_run)
    bar.update((runs + 1) - (bar.n - done_before))
    results.append(res)
  bar.close()
  return finish(grid, workdir, cells, results)


def finish(grid, workdir: str, cells, results: list[dict]) -> list[dict]:
  """Writes results.{md,csv,json} and the plots; returns the rows."""
  tasks = list(grid.tasks)
  rows = report.summarize(results, tasks,
                          compare_lib.as_plain(grid.get("published", {})))
  split = grid.get("report_split", "validation")
  report.write_all(workdir, rows, tasks, _task_metrics(grid), split)
  tokens_per_step = int(grid.pretrain.batch_size) * int(grid.pretrain.seq_len)
  plots.plot_losses(workdir, [c.name for c in cells if c.pretrained],
                    os.path.join(workdir, "losses.png"), tokens_per_step)
  plots.plot_tasks(rows, tasks, os.path.join(workdir, "tasks.png"))
  return rows


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
  run(grid, workdir)
  with open(os.path.join(workdir, "results.md"), encoding="utf-8") as f:
    print(f.read())


if __name__ == "__main__":
  app.run(main)
