"""Runs a grid: pre-trains every cell, reads it three ways, reports.

    python -m zoo.compare --config configs/compare/demo.py --workdir DIR

For each cell (in grid order, random-init rows included): pre-training
(`cells.pretrain`), then the views `minimal_pairs`, `probe` and
`few_shot`, each written to `DIR/cells/<cell>/views/<view>.json` as soon
as it is done; then the non-neural floors (`DIR/floors.json`), and the
tables and plots (`report`, `plots`). A rerun reads back what is on disk
and resumes a killed pre-training from its checkpoint; a result made under
another recipe is refused rather than mixed in.

Under `jax.distributed` every process runs this same code: each cell
pre-trains sharded across all processes (the trainer's mesh), the views
deal their chunks of texts and fine-tuning runs out across processes
(`distributed.split_work`) and gather the results, and only process 0
writes files. Every process must see the same workdir.
"""

import os
import sys
import time

from tqdm import tqdm

import objectives
from zoo import compile_cache
from zoo import distributed
from zoo import loading
from zoo.harness import baselines
from zoo.harness import cells as cells_lib
from zoo.harness import compressed
from zoo.harness import few_shot
from zoo.harness import minimal_pairs
from zoo.harness import parallel
from zoo.harness import plots
from zoo.harness import probe
from zoo.harness import report
from zoo.harness import seeds as seeds_lib

VIEWS = report.VIEWS  # the three views of every row


class _Inputs:
  """What every cell of a grid reads: tokenizer, pairs, tasks (loaded once)."""

  def __init__(self, grid):
    import data.minimal_pairs  # pylint: disable=import-outside-toplevel
    import data.tasks  # pylint: disable=import-outside-toplevel
    self.tokenizer = cells_lib.tokenizer_of(grid)
    self.specials = objectives.Specials(**self.tokenizer.specials())
    self.split = grid.get("report_split", "validation")
    sample_dir = grid.pretrain.data.sample_dir or None
    self.pairs = data.minimal_pairs.load(
        sample_dir, self.tokenizer, int(grid.minimal_pairs.n))
    self.tasks = {t: data.tasks.load(t) for t in grid.tasks}


def _view(grid, inputs: _Inputs, view: str, loaded, cell,
          quant=None) -> dict:
  """Computes one view of a cell's backbone (a random-init row's too: every
  view reads the same random backbone); `quant` makes few-shot
  fine-tuning quantisation-aware."""
  recipe = view_recipe(grid, cell, view)
  hold = compressed.hold_sparsity(cell)
  if view == "few_shot" and hold is not None:
    recipe["prune"] = hold  # a pruned row fine-tunes as sparse as it is
  if view == "few_shot" and quant is not None:
    recipe["quant"] = quant
  if view.startswith("minimal_pairs"):  # "minimal_pairs@<method>" too
    how = view.partition("@")[2] or None
    return minimal_pairs.run(loaded, inputs.pairs, how=how)
  if view == "probe":
    return {"tasks": {name: probe.run(loaded, task, inputs.split, recipe)
                      for name, task in inputs.tasks.items()}}
  backbone = (loaded.family, loaded.config, loaded.params)
  return {"tasks": few_shot.run_tasks(backbone, inputs.tasks,
                                      inputs.tokenizer, recipe,
                                      list(grid.seeds), inputs.split)}


def view_recipe(grid, cell, view: str) -> dict:
  """The grid's recipe of `view` for `cell`, as plain data: few-shot
  fine-tuning with the cell family's `by_family` arguments on top."""
  recipe = cells_lib.as_plain(grid.get(view.partition("@")[0]))
  if view == "few_shot":
    recipe.update(recipe.pop("by_family", {}).get(cell.model, {}))
  return recipe


def view_key(grid, cell, view: str) -> str:
  """The fingerprint of everything a view's result depends on (for a row
  reading another cell's backbone, that cell's config and the transform)."""
  recipe = view_recipe(grid, cell, view)
  parts = [cells_lib.cell_config(grid, cell), recipe, list(grid.tasks),
           list(grid.seeds), grid.get("report_split", "validation"), view]
  if cell.source:
    source = next(c for c in cells_lib.parse_cells(grid)
                  if c.name == cell.source)
    parts += [cell.source, cell.quant, cells_lib.cell_config(grid, source)]
  return cells_lib.fingerprint(*parts)


def _stored(path: str, key: str, celldir: str):
  """A stored view result, None if absent; another grid's is an error."""
  found = cells_lib.read_json(path)
  if found is not None and found.get("fingerprint") != key:
    raise ValueError(
        f"{path} was made under another grid (config, recipe, tasks or "
        f"seeds changed); use a new --workdir or delete {celldir}")
  return found


def _objective_name(cell) -> str:
  if cell.source:
    return f"{cell.quant or 'copy'} of {cell.source}"
  return cell.objective or "none"


def views_of(grid, cell=None) -> tuple[str, ...]:
  """The views a grid computes per cell: the three; for a random-init row,
  `minimal_pairs@<method>` for each other scoring its family's rows are
  read by (`cells.scorings`); and the footprint (`compressed.footprint`)
  when the grid compares rows to one (`compare_to`)."""
  extra = tuple(f"minimal_pairs@{how}" for how in (
      cells_lib.scorings(grid, cell) if cell is not None else ()))
  return VIEWS + extra + (("footprint",) if grid.get("compare_to") else ())


class _Backbone:
  """A cell's backbone, loaded (and an int8 row calibrated) on first use."""

  def __init__(self, grid, cell, celldir: str, inputs: _Inputs):
    self.args = (grid, cell, celldir, inputs)
    self.loaded = self.stats = None

  def get(self):
    """`(Loaded, int8 calibration stats or None)`."""
    if self.loaded is None:
      grid, cell, celldir, inputs = self.args
      self.loaded = _load(grid, cell, celldir, inputs)
      self.stats = compressed.calibration(
          cell, self.loaded, cells_lib.cell_config(grid, cell))
    return self.loaded, self.stats


def _compute(grid, inputs: _Inputs, view: str, cell, backbone) -> dict:
  loaded, stats = backbone.get()
  if view == "footprint":
    return compressed.footprint(loaded, stats)
  if view == "few_shot" and stats is not None:
    # Q8BERT's recipe: quantisation-aware fine-tuning, its own ranges.
    return _view(grid, inputs, view, loaded, cell, compressed.CALIBRATION)
  with compressed.views_of(stats):
    return _view(grid, inputs, view, loaded, cell)


def run_cell(grid, cell, celldir: str, inputs: _Inputs, tick) -> dict:
  """Pre-trains (if needed) and evaluates one cell; returns its record."""
  record = {"name": cell.name, "objective": _objective_name(cell),
            "model": cell.model, "size": cell.size, "t5_row": cell.t5_row,
            "baseline": cell.baseline, "pretrain": {}, "views": {},
            "seconds": {}, "compile_seconds": {}}
  if cell.pretrained:
    tick(f"{cell.name}: pre-training")
    record["pretrain"] = cells_lib.pretrain(grid, cell, celldir,
                                            inputs.tokenizer)
    record["seconds"]["pretrain"] = record["pretrain"]["seconds"]
    record["compile_seconds"]["pretrain"] = record["pretrain"].get(
        "compile_seconds", 0.0)
    record.update(cells_lib.flops_estimate(compressed.resolve(
        cells_lib.cell_config(grid, cell), celldir), inputs.specials))
    tick(None)
  backbone = _Backbone(grid, cell, celldir, inputs)
  for view in views_of(grid, cell):
    tick(f"{cell.name}: {view}")
    path = os.path.join(celldir, "views", f"{view}.json")
    key = view_key(grid, cell, view)
    result = _stored(path, key, celldir)
    if result is None:
      start, compiling = time.time(), compile_cache.compile_seconds()
      result = dict(_compute(grid, inputs, view, cell, backbone),
                    fingerprint=key, seconds=time.time() - start,
                    compile_seconds=compile_cache.compile_seconds() - compiling)
      cells_lib.write_json(path, result)
    record["views"][view] = result
    record["seconds"][view] = result["seconds"]
    record["compile_seconds"][view] = result.get("compile_seconds", 0.0)
    tick(None)
  return record


def _load(grid, cell, celldir: str, inputs: _Inputs) -> loading.Loaded:
  """The cell's backbone as a `Loaded` (what a notebook user would get)."""
  family, config, params = cells_lib.backbone(grid, cell, celldir,
                                              inputs.specials)
  return loading.Loaded(family, config, params, inputs.tokenizer, None,
                        celldir, objective=cell.objective or None)


def floors(grid, workdir: str, inputs: _Inputs) -> dict:
  """The non-neural floor of every view (cached in DIR/floors.json)."""
  path = os.path.join(workdir, "floors.json")
  key = cells_lib.fingerprint(grid.minimal_pairs, grid.few_shot,
                              list(grid.tasks), list(grid.seeds),
                              inputs.split, grid.pretrain.data)
  found = cells_lib.read_json(path)
  if found is not None and found.get("fingerprint") == key:
    return found
  start = time.time()
  out = baselines.floors(inputs.pairs, inputs.tasks, inputs.tokenizer,
                         grid, inputs.split)
  out.update(fingerprint=key, seconds=time.time() - start)
  cells_lib.write_json(path, out)
  return out


def work(grid, workdir: str, claims: str) -> None:
  """One worker of `zoo.compare --workers N` (`parallel.work`)."""
  compile_cache.watch()
  parallel.work(grid, workdir, claims, run_cell, lambda: _Inputs(grid))


def run(grid, workdir: str, workers: int = 1,
        argv: list[str] | None = None) -> dict:
  """Runs (or resumes) every cell, then writes tables and plots.

  Args:
    grid: the grid config.
    workdir: where everything is written.
    workers: more than 1 first runs the cells that read no other cell in
      that many pinned CPU processes (`parallel`), started with `argv`
      (this command line).
    argv: the command line of this process (`sys.argv`).

  Returns:
    The results (`report.build`), also written to DIR/results.json.
  """
  cells = cells_lib.check_grid(grid)
  compile_cache.watch()
  replicas = seeds_lib.replicas(grid, workdir)
  if distributed.is_main():
    for _, _, folder in replicas:
      os.makedirs(folder, exist_ok=True)
  # Process 0 builds the sample, tokenizer and pair suite the others read.
  inputs = distributed.main_first(lambda: _Inputs(grid), "harness_inputs")
  side_by_side = None
  if workers > 1:
    side_by_side = {"workers": workers, "seconds": round(
        parallel.run_workers(argv or sys.argv, workdir, workers,
                             len(replicas) * len(cells)), 1)}
  steps = len(replicas) * sum(len(views_of(grid)) + cell.pretrained
                              for cell in cells)
  steps += 1 + bool(grid.get("compare_to"))
  bar = tqdm(total=steps, desc="harness", dynamic_ncols=True,
             file=sys.stderr, disable=not distributed.is_main())
  tick = lambda text: bar.set_postfix_str(text) if text else bar.update(1)
  per_seed = [[run_cell(replica, cell, os.path.join(folder, cell.name),
                        inputs, tick) for cell in cells]
              for _, replica, folder in replicas]
  records = [seeds_lib.merge(list(runs)) for runs in zip(*per_seed)]
  tick("floors")
  floor = floors(grid, workdir, inputs)
  tick(None)
  timing = None
  if grid.get("compare_to"):
    tick("latency")
    timing = compressed.latencies({
        c.name: _Backbone(grid, c, os.path.join(workdir, "cells", c.name),
                          inputs).get() for c in cells})
    tick(None)
  bar.close()
  return finish(grid, workdir, cells, records, floor, timing, side_by_side)


def finish(grid, workdir: str, cells, records: list[dict],
           floor: dict, latency: dict | None = None,
           side_by_side: dict | None = None) -> dict:
  """Writes results.{md,csv,json} and the plots (process 0); returns the
  results (on every process). `latency`: row -> ms (`compressed`);
  `side_by_side`: {"workers", "seconds"} of the workers that ran cells."""
  results = report.build(grid, records, floor, latency)
  if side_by_side:
    results["profile"]["side_by_side"] = side_by_side
  if not distributed.is_main():
    return results
  report.write_all(workdir, results)
  tokens_per_step = int(grid.pretrain.batch_size) * int(grid.pretrain.seq_len)
  plots.plot_losses(workdir, [c.name for c in cells if c.pretrained],
                    os.path.join(workdir, "losses.png"), tokens_per_step)
  plots.plot_views(results, os.path.join(workdir, "views.png"))
  plots.plot_finetuning(records, os.path.join(workdir, "finetuning.png"))
  if results.get("compare_to"):
    plots.plot_compression(results, os.path.join(workdir, "compression.png"))
  return results
