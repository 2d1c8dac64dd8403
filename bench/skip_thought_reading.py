"""Skip-Thought's encoder reading a text sentence by sentence, or whole.

    python bench/skip_thought_reading.py --workdir workdirs/prebert6 \\
        --grid_arg tokens=11600000 [--rows skip_thought,random_skip_thought] \\
        [--config configs.compare.family]

Pre-training shows the encoder one sentence at a time (its state restarts
at every sentence). A task's text has several, so a reader chooses: the
zoo's default reads it as pre-training did (`sentence_reading=True`:
split as the sample is split, each sentence encoded afresh), the other
way reads the whole text as one sequence. For each row of a finished
`zoo.compare` run of `--config` (with `--grid_arg`, the argument
after its ":"), this runs the grid's probe view both
ways and prints one JSON line per (row, reading): each task's metric (the
grid's point value, every example of the report split) and their average.
"""

import argparse
import dataclasses
import importlib
import json
import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

# pylint: disable=wrong-import-position
from zoo.harness import cells as cells_lib
from zoo.harness import probe
from zoo.harness import run as run_lib
from zoo.harness import statistics


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--workdir", default="workdirs/prebert6")
  p.add_argument("--config", default="configs.compare.family")
  p.add_argument("--grid_arg", default="",
                 help="the grid's argument, e.g. tokens=11600000")
  p.add_argument("--rows", default="skip_thought,random_skip_thought")
  args = p.parse_args(argv)
  grid = importlib.import_module(args.config).get_config(args.grid_arg or None)
  inputs = run_lib._Inputs(grid)  # pylint: disable=protected-access
  cells = {c.name: c for c in cells_lib.parse_cells(grid)}
  for name in args.rows.split(","):
    if name not in cells or cells[name].model != "skip_thought":
      raise SystemExit(f"{name!r} is no skip_thought row of the grid")
    celldir = os.path.join(args.workdir, "cells", name)
    loaded = run_lib._load(grid, cells[name], celldir, inputs)  # pylint: disable=protected-access
    recipe = run_lib.view_recipe(grid, cells[name], "probe")
    for reading in (True, False):
      config = dataclasses.replace(loaded.config, sentence_reading=reading)
      view = dataclasses.replace(loaded, config=config)
      scores = {}
      for task_name, task in inputs.tasks.items():
        out = probe.run(view, task, inputs.split, recipe)
        scores[task_name] = round(statistics.point(
            out["preds"], out["labels"], out["metric"]), 1)
      print(json.dumps({"row": name,
                        "reading": "sentences" if reading else "whole text",
                        **scores, "average": round(
                            sum(scores.values()) / len(scores), 1)}),
            flush=True)


if __name__ == "__main__":
  main()
