"""Pre-training seeds: every cell pre-trained (and read) once per seed.

A grid may list `pretrain_seeds` (default: just `pretrain.seed`). Each
seed is a replica of the whole grid with `pretrain.seed` set to it: its
params, dropout, corruption and data order, and its random-init rows'
init, all change with the seed; the data, tasks, few-shot training sets
and recipes do not. The first seed's cells live in `DIR/cells/`, as a
one-seed grid's do (so adding seeds to a finished grid reuses its runs),
the others' in `DIR/seeds/<seed>/cells/`.

`merge` then joins each cell's records: every view's predictions are
stacked along the seed axis (minimal pairs and probes [P][N], few-shot
[P x S][N]), so the bootstrap of `zoo.harness.statistics`, which resamples
examples and seeds, resamples the pre-training seeds too: the intervals
then cover what another pre-training run would change.
"""

import os

import ml_collections
import numpy as np

# Per-task lists of a view result stacked across seeds.
STACKED = ("preds", "preds_last", "losses")


def seeds_of(grid) -> list[int]:
  """The grid's pre-training seeds, checked (distinct integers)."""
  seeds = list(grid.get("pretrain_seeds") or [int(grid.pretrain.seed)])
  if len(set(seeds)) != len(seeds) or not all(
      isinstance(s, int) for s in seeds):
    raise ValueError(f"pretrain_seeds {seeds} must be distinct integers")
  return seeds


def replicas(grid, workdir: str) -> list[tuple[int, object, str]]:
  """`(seed, grid of that seed, its cells directory)` for every seed."""
  out = []
  for i, seed in enumerate(seeds_of(grid)):
    replica = ml_collections.ConfigDict(grid.to_dict())
    replica.pretrain.seed = seed
    cells = (os.path.join(workdir, "cells") if i == 0 else
             os.path.join(workdir, "seeds", str(seed), "cells"))
    out.append((seed, replica, cells))
  return out


def _merge_view(results: list[dict]) -> dict:
  """One view's results of several seeds as one, predictions stacked."""
  out = dict(results[0])
  out["seconds"] = float(sum(r.get("seconds", 0.0) for r in results))
  if "tasks" not in out:
    return out  # a footprint: the first seed's
  tasks = {}
  for name, first in out["tasks"].items():
    task = dict(first)
    for key in STACKED:
      if key in first:
        task[key] = [row for r in results for row in r["tasks"][name][key]]
    tasks[name] = task
  out["tasks"] = tasks
  return out


def merge(per_seed: list[dict]) -> dict:
  """One cell's records of every seed (in seed order) as one record:
  views stacked, pre-training figures averaged, seconds summed."""
  out = dict(per_seed[0])
  if len(per_seed) == 1:
    return out
  out["views"] = {v: _merge_view([r["views"][v] for r in per_seed])
                  for v in per_seed[0]["views"]}
  for key in ("seconds", "compile_seconds"):
    out[key] = {k: float(sum(r.get(key, {}).get(k, 0.0) for r in per_seed))
                for k in per_seed[0].get(key, {})}
  if per_seed[0]["pretrain"]:
    keys = [k for k, v in per_seed[0]["pretrain"].items()
            if isinstance(v, (int, float))]
    out["pretrain"] = dict(per_seed[0]["pretrain"], **{
        k: float(np.mean([r["pretrain"][k] for r in per_seed])) for k in keys},
                           seeds=len(per_seed))
  return out
