"""The few-shot recipe against a finished grid's rows: learning rate and steps.

    python bench/few_shot_recipe.py --workdir workdirs/demo \\
        --rows mlm,random_bert --lrs 2e-3,5e-4,1e-4 --steps 60 \\
        [--head_lrs 1,10] [--mode frozen] [--standardize 0,1]
        [--config configs.compare.family] [--config MODULE:ARG]

Reads the rows' backbones from a finished `zoo.compare` run of
`--config` (the demo grid by default) and fine-tunes each on the grid's
tasks and few-shot sets with the grid's recipe (a family's `by_family`
arguments included), changing only the learning rate, the head's rate
over it, the step count and whether the head standardises its pooled
features. One JSON line per (row, lr, head_lr, standardize): the
metric per task (the grid's point value, every example of the report
split) and their average. What it answers: does another recipe change
which row wins the few-shot view?
"""

import argparse
import importlib
import json
import os
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

# pylint: disable=wrong-import-position
from zoo.harness import cells as cells_lib
from zoo.harness import few_shot
from zoo.harness import run as run_lib
from zoo.harness import statistics


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--workdir", default="workdirs/demo")
  p.add_argument("--config", default="configs.compare.demo",
                 help="module of the grid the workdir ran, with its "
                 "argument after a colon (configs.compare.compress:"
                 "teacher=small)")
  p.add_argument("--rows", default="mlm,random_bert")
  p.add_argument("--lrs", default="2e-3,5e-4,1e-4")
  p.add_argument("--steps", type=int, default=None,
                 help="fine-tuning steps (default: the grid's)")
  p.add_argument("--head_lrs", default="1",
                 help="the head's learning rate over the backbone's")
  p.add_argument("--mode", default=None,
                 help="fine-tuning mode (default: the grid's for the row)")
  p.add_argument("--standardize", default=None,
                 help="comma list of 0/1: the head standardises its pooled "
                 "features (default: the grid's)")
  args = p.parse_args(argv)
  module, _, arg = args.config.partition(":")
  grid = importlib.import_module(module).get_config(arg or None)
  inputs = run_lib._Inputs(grid)  # pylint: disable=protected-access
  cells = {c.name: c for c in cells_lib.parse_cells(grid)}
  unknown = sorted(set(args.rows.split(",")) - set(cells))
  if unknown:
    raise SystemExit(f"rows {unknown} are not cells of the grid: "
                     f"{sorted(cells)}")
  for name in args.rows.split(","):
    celldir = os.path.join(args.workdir, "cells", name)
    loaded = run_lib._load(grid, cells[name], celldir, inputs)  # pylint: disable=protected-access
    grid_recipe = run_lib.view_recipe(grid, cells[name], "few_shot")
    standardize = ([bool(int(x)) for x in args.standardize.split(",")]
                   if args.standardize else
                   [grid_recipe.get("standardize", False)])
    for lr, head_lr, std in ((float(a), float(b), c)
                             for a in args.lrs.split(",")
                             for b in args.head_lrs.split(",")
                             for c in standardize):
      recipe = dict(grid_recipe, lr=lr, head_lr=head_lr, standardize=std,
                    steps=args.steps or grid_recipe["steps"])
      recipe["mode"] = args.mode or recipe.get("mode", "full")
      start = time.time()
      out = few_shot.run_tasks((loaded.family, loaded.config, loaded.params),
                               inputs.tasks, inputs.tokenizer, recipe,
                               list(grid.seeds), inputs.split)
      scores = {k: round(statistics.point(v["preds"], v["labels"],
                                          v["metric"]), 1)
                for k, v in out.items()}
      print(json.dumps({"row": name, "mode": recipe["mode"], "lr": lr,
                        "head_lr": head_lr, "standardize": std,
                        "steps": recipe["steps"],
                        **scores,
                        "average": round(sum(scores.values()) / len(scores),
                                         1),
                        "seconds": round(time.time() - start)}), flush=True)


if __name__ == "__main__":
  main()
