"""Compressed rows of a grid, and what each costs to store and to run.

A grid cell may make a smaller or cheaper model in three ways:

- prune while it pre-trains: `optimizer: {"prune": {...}}`
  (`zoo.compress.magnitude`, Zhu & Gupta's schedule); its few-shot
  fine-tuning keeps the sparsity it reached (`hold_sparsity`: the mask of
  its smallest weights, i.e. its zeros, stays);
- read another cell's trained backbone without pre-training (`source`),
  quantised (`quant: "int8"`, Q8BERT): for the zero-shot and probe views
  post-training, its input ranges calibrated on `CALIBRATION_BATCHES`
  validation batches, the backbone run fake-quantised (int8 codes of
  weights and matmul inputs, `zoo.compress.quant`); few-shot fine-tuning
  is quantisation-aware, as in the paper (`zoo.finetune`'s `quant`: the
  straight-through estimator, moving input ranges);
- learn from another cell: "@<cell>" in `objective_args` names that
  cell's workdir (a distillation teacher, `objectives.distill`); the
  named cell comes earlier in the grid.

`footprint` measures a row's backbone: parameters, non-zero parameters and
bytes on disk (float32 safetensors, or the int8 export); `latencies` the
CPU time of one forward at batch 1 x 128 of every row, taking turns once
the grid is done. A grid with `compare_to` (a cell name) gets both, and
the compression table (`report.compression_table`).
"""

import contextlib
import os
import tempfile
import time

import jax
import numpy as np
import safetensors.numpy
from flax import traverse_util

from zoo.compress import calibration as calibration_lib
from zoo.compress import magnitude
from zoo.compress import quant
from zoo.compress import quant_io
from zoo import train_lib

REF = "@"
QUANT = ("int8",)
CALIBRATION_BATCHES = 8
# Calibration is a few batches and few-shot fine-tuning a few dozen steps:
# a fast moving max (Q8BERT's 0.9999 is for a whole training run).
CALIBRATION = quant.QuantConfig(ema_decay=0.9)
LATENCY_SHAPE = (1, 128)  # batch x length of the latency column
LATENCY_RUNS = 30


def refs(cell) -> list[str]:
  """The cells `cell` reads: its "@cell" options' and its `source`."""
  out = [v[1:] for v in cell.objective_args.values()
         if isinstance(v, str) and v.startswith(REF)]
  return out + ([cell.source] if cell.source else [])


def check_refs(cells) -> None:
  """Rejects a `source` or "@cell" that names no earlier cell, a `quant`
  without a `source`, or an unknown `quant`."""
  earlier = set()
  for cell in cells:
    for ref in refs(cell):
      if ref not in earlier:
        raise ValueError(f"grid cell {cell.name!r} reads cell {ref!r}, which "
                         "is not an earlier cell of the grid")
    if cell.quant and (cell.quant not in QUANT or not cell.source):
      raise ValueError(f"grid cell {cell.name!r}: quant {cell.quant!r} needs "
                       f"one of {QUANT} and a `source` cell")
    if cell.source and cell.objective:
      raise ValueError(f"grid cell {cell.name!r} reads {cell.source!r}: it "
                       "pre-trains nothing (no objective)")
    earlier.add(cell.name)


def cell_dir(celldir: str, name: str) -> str:
  """The directory of cell `name`, beside `celldir`."""
  return os.path.join(os.path.dirname(os.path.normpath(celldir)), name)


def resolve(config, celldir: str):
  """The config with each "@<cell>" option replaced by that cell's dir."""
  args = config.objective_args
  for key in list(args.keys()):
    value = args[key]
    if isinstance(value, str) and value.startswith(REF):
      args[key] = cell_dir(celldir, value[1:])
  return config


def hold_sparsity(cell) -> magnitude.Config | None:
  """The pruning that keeps a pruned cell's sparsity while it fine-tunes
  (None for a cell that does not prune)."""
  full = magnitude.from_block(cell.optimizer.get("prune"))
  if full is None:
    return None
  return magnitude.Config(target=full.target, initial=full.target,
                          begin_step=0, end_step=1, frequency=1,
                          scope=full.scope, exclude=full.exclude)


def calibration(cell, loaded, train_config):
  """An int8 row's "quant_stats": input ranges over `CALIBRATION_BATCHES`
  validation batches of `train_config`; None for other rows."""
  if not cell.quant:
    return None
  loader = train_lib.build_loader(train_config, "validation",
                                  int(train_config.batch_size),
                                  int(train_config.seed))
  batches = ({"tokens": b["tokens"], "segment_ids": b["doc_ids"]}
             for b in (next(loader) for _ in range(CALIBRATION_BATCHES)))
  return calibration_lib.calibrate(loaded.model, loaded.params, batches,
                                   CALIBRATION)


@contextlib.contextmanager
def views_of(stats):
  """Inside: views see the backbone as its row stores it: fake-quantised
  with `stats` for an int8 row (`calibration`), unchanged for None."""
  if stats is None:
    yield
    return
  jax.clear_caches()  # programs traced in float would be reused
  try:
    with quant.fake_quantized(CALIBRATION, stats=stats):
      yield
  finally:
    jax.clear_caches()


def _bytes_on_disk(loaded, stats) -> int:
  """Bytes of the backbone's file: float32 safetensors, or the int8 export
  (`quant_io`) of an int8 row."""
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "backbone.safetensors")
    if stats is not None:
      quant_io.save(path, quant.quantize_params(loaded.params, stats,
                                                CALIBRATION), CALIBRATION)
    else:
      flat = traverse_util.flatten_dict(jax.device_get(loaded.params))
      safetensors.numpy.save_file(
          {"/".join(k): np.asarray(v) for k, v in flat.items()}, path)
    return os.path.getsize(path)


def _forward(loaded, stats):
  """A jitted forward at `LATENCY_SHAPE` and its arguments (s8 x s8 -> s32
  matmuls for an int8 row)."""
  model = loaded.model
  apply = lambda variables, t: model.apply(variables, t)["hidden"]
  variables = {"params": loaded.params}
  if stats is not None:
    variables = quant.quantize_params(loaded.params, stats, CALIBRATION)
    apply = quant.int8(apply, CALIBRATION)
  return jax.jit(apply), (variables, np.full(LATENCY_SHAPE, 7, np.int32))


def latencies(backbones: dict) -> dict[str, float]:
  """Median milliseconds of one forward of each row's backbone at
  `LATENCY_SHAPE`, measured taking turns (round r runs every row once), so
  a shared host's drift falls on all rows alike.

  Args:
    backbones: row name -> `(Loaded, int8 stats or None)`.
  """
  runs = {name: _forward(*pair) for name, pair in backbones.items()}
  for fn, args in runs.values():
    for _ in range(3):
      jax.block_until_ready(fn(*args))
  times = {name: [] for name in runs}
  for _ in range(LATENCY_RUNS):
    for name, (fn, args) in runs.items():
      start = time.perf_counter()
      jax.block_until_ready(fn(*args))
      times[name].append(time.perf_counter() - start)
  return {name: float(np.median(t) * 1e3) for name, t in times.items()}


def footprint(loaded, stats) -> dict:
  """{"params", "nonzero", "bytes"} of a row's backbone (`stats`: an int8
  row's `calibration`, else None)."""
  leaves = [np.asarray(x) for x in jax.tree.leaves(
      jax.device_get(loaded.params))]
  return {"params": int(sum(x.size for x in leaves)),
          "nonzero": int(sum(np.count_nonzero(x) for x in leaves)),
          "bytes": _bytes_on_disk(loaded, stats)}
