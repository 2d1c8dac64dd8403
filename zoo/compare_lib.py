"""The cells of a comparison grid: pre-trained, fine-tuned, remembered.

A grid (`configs/compare/*.py`, `get_config(arg)`) is a ConfigDict:

  pretrain: one full training config (`configs.common.base_config()`)
    that every cell shares, so every cell reads the same rows for the same
    token budget (`steps * batch_size * seq_len`).
  cells: a list of dicts, one per scheme: `name`, `objective` ("" for the
    no-pre-training baseline), `model` (family), and optionally `size`
    (default `pretrain.size`), `objective_args`, `model_args`, and `t5_row`
    ("<table>/<row>" of `configs.compare.t5_tables.PUBLISHED`).
  tasks: downstream task names (`data.tasks.names()`).
  seeds: fine-tuning seeds (each task runs once per seed).
  finetune: the one recipe, keyword arguments of `zoo.finetune.finetune`.
  report_split: the evaluation split the tables show.

A cell's directory `DIR/cells/<name>/` is the trainer's workdir
(config.json, checkpoints/, metrics.jsonl, tokenizer/) plus
`finetune/<task>.seed<k>.json`, one per finished fine-tuning run, and
`done.json`, written last, holding the cell's whole result. Rerunning skips
a cell with `done.json`, resumes pre-training from the latest checkpoint,
and skips fine-tuning runs already on disk.
"""

import dataclasses
import hashlib
import json
import math
import os
from typing import Any

import flax.linen as nn
import jax
import ml_collections

import objectives
from zoo import checkpoint as ckpt_lib
from zoo import models
from zoo import train as train_mod
from zoo import train_lib
from zoo.metrics_log import read_metrics

DONE = "done.json"
_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789_-.")


@dataclasses.dataclass(frozen=True)
class Cell:
  """One scheme of a grid: objective x model family x size."""
  name: str
  objective: str  # "" = no pre-training (random init)
  model: str
  size: str
  objective_args: dict
  model_args: dict
  t5_row: str = ""

  @property
  def pretrained(self) -> bool:
    """False for the no-pre-training baseline."""
    return bool(self.objective)


def _as_dict(value) -> dict:
  if value is None:
    return {}
  return value.to_dict() if hasattr(value, "to_dict") else dict(value)


def as_plain(value):
  """A ConfigDict (or dict) as plain nested dicts, for JSON."""
  return _as_dict(value)


def parse_cells(grid) -> list[Cell]:
  """The grid's cells, checked: unique names, known objectives and models.

  Raises:
    ValueError: naming the first bad cell and what is wrong with it.
  """
  known_obj, known_fam = objectives.names(), models.families()
  cells, seen = [], set()
  for i, raw in enumerate(grid.cells):
    raw = _as_dict(raw)
    unknown = set(raw) - {f.name for f in dataclasses.fields(Cell)}
    if unknown or "model" not in raw:
      raise ValueError(f"grid cell {i} ({raw}) has unknown keys "
                       f"{sorted(unknown)} or no 'model'")
    objective = raw.get("objective", "") or ""
    size = raw.get("size") or grid.pretrain.size
    name = raw.get("name") or f"{objective or 'none'}_{raw['model']}_{size}"
    if name in seen or not set(name) <= _NAME_CHARS:
      raise ValueError(f"grid cell name {name!r} is repeated or not made of "
                       "lower-case letters, digits, '_', '-', '.'")
    if objective and objective not in known_obj:
      raise ValueError(f"grid cell {name!r}: objective {objective!r} is not "
                       f"registered; registered: {known_obj}")
    if raw["model"] not in known_fam:
      raise ValueError(f"grid cell {name!r}: unknown model family "
                       f"{raw['model']!r}; known: {known_fam}")
    seen.add(name)
    cells.append(Cell(name, objective, raw["model"], size,
                      _as_dict(raw.get("objective_args")),
                      _as_dict(raw.get("model_args")),
                      raw.get("t5_row", "") or ""))
  if not cells:
    raise ValueError("the grid has no cells")
  return cells


def check_grid(grid) -> list[Cell]:
  """Validates the whole grid before anything runs; returns its cells."""
  import data.tasks  # pylint: disable=import-outside-toplevel
  for key in ("pretrain", "cells", "tasks", "seeds", "finetune"):
    if key not in grid:
      raise ValueError(f"the grid config lacks the key {key!r}")
  unknown = sorted(set(grid.tasks) - set(data.tasks.names()))
  if unknown or not grid.tasks:
    raise ValueError(f"grid tasks {list(grid.tasks)}: unknown {unknown}; "
                     f"known: {data.tasks.names()}")
  if not grid.seeds or len(set(grid.seeds)) != len(grid.seeds):
    raise ValueError(f"grid seeds {list(grid.seeds)} must be distinct and "
                     "at least one")
  if grid.pretrain.data.source == "synthetic":
    raise ValueError("the harness fine-tunes on real tasks, so pre-training "
                     "needs a real text source with a tokenizer, not "
                     "'synthetic'")
  return parse_cells(grid)


def cell_config(grid, cell: Cell) -> ml_collections.ConfigDict:
  """The cell's training config: the shared `pretrain` with its scheme."""
  config = ml_collections.ConfigDict(grid.pretrain.to_dict())
  config.model, config.size = cell.model, cell.size
  config.objective = cell.objective or "none"
  config.objective_args = ml_collections.ConfigDict(cell.objective_args)
  config.model_args = ml_collections.ConfigDict(cell.model_args)
  return config


def fingerprint(grid, cell: Cell) -> str:
  """A hash of everything a cell's results depend on."""
  parts = {"config": json.loads(cell_config(grid, cell).to_json()),
           "finetune": _as_dict(grid.finetune), "tasks": list(grid.tasks),
           "seeds": list(grid.seeds),
           "split": grid.get("report_split", "validation")}
  text = json.dumps(parts, sort_keys=True, default=str)
  return hashlib.sha256(text.encode()).hexdigest()[:16]


def read_json(path: str):
  """A JSON file's value, or None when it does not exist."""
  if not os.path.exists(path):
    return None
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def write_json(path: str, value) -> None:
  """Writes JSON atomically: a killed run never leaves half a file."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  tmp = path + ".tmp"
  with open(tmp, "w", encoding="utf-8") as f:
    json.dump(value, f, indent=1, sort_keys=True)
  os.replace(tmp, path)


def flops_estimate(config, specials: objectives.Specials) -> dict[str, float]:
  """Analytic pre-training FLOPs of a cell's config, from its param shapes.

  Every token is taken to pass forward once through every weight matrix of
  the objective's networks (so ELECTRA pays for generator and
  discriminator, BART and T5 for encoder and decoder) and through one
  vocabulary projection; attention adds `4 L T D` per token forward.
  Training costs three forward passes (forward plus backward).

  Returns:
    {"flops_per_token", "tokens", "flops_total", "params"} as floats.
  """
  objective = train_lib.build_objective(config, specials)
  seq_len = int(config.seq_len)
  shapes = jax.eval_shape(objective.init, jax.random.key(0),
                          train_lib.example_batch(seq_len))
  flat = jax.tree_util.tree_flatten_with_path(nn.meta.unbox(shapes))[0]
  vocab, matmul, vocab_proj, total = specials.vocab_size, 0, 0, 0
  for path, leaf in flat:
    size = math.prod(leaf.shape)
    total += size
    is_position = "pos" in jax.tree_util.keystr(path).lower()
    if len(leaf.shape) < 2 or is_position:
      continue
    if vocab in leaf.shape:
      vocab_proj = max(vocab_proj, size)
    else:
      matmul += size
  model_cfg = objective.backbone(nn.meta.unbox(shapes))[1]
  layers = getattr(model_cfg, "num_layers", 0) or 0
  embed = getattr(model_cfg, "embed_dim", 0) or 0
  stacks = 2 if objective.interface == "encdec" else 1
  forward = 2 * (matmul + vocab_proj) + 4 * stacks * layers * seq_len * embed
  tokens = float(int(config.steps) * int(config.batch_size) * seq_len)
  return {"flops_per_token": 3.0 * forward, "tokens": tokens,
          "flops_total": 3.0 * forward * tokens, "params": float(total)}


def tokenizer_of(grid, celldir: str | None = None):
  """The cell's saved tokenizer, else the one the grid's data names."""
  import data  # pylint: disable=import-outside-toplevel
  from data import tokenizer as tok_lib  # pylint: disable=import-outside-toplevel
  saved = os.path.join(celldir, "tokenizer") if celldir else ""
  if saved and os.path.isdir(saved):
    return tok_lib.load_path(saved)
  return data.load_tokenizer(grid.pretrain.data)


def pretrain(grid, cell: Cell, celldir: str) -> dict[str, Any]:
  """Pre-trains the cell (resuming) and returns its final train metrics."""
  done = read_json(os.path.join(celldir, "pretrain.json"))
  if done is not None:
    return done
  final = train_mod.train(cell_config(grid, cell), celldir)
  if "loss" not in final:  # killed after its last save: the last log line
    rows = read_metrics(celldir, "train")
    final = rows[-1] if rows else final
  scalars = {k: float(v) for k, v in final.items()
             if isinstance(v, (int, float)) and k not in
             ("tokens_per_s", "time")}
  write_json(os.path.join(celldir, "pretrain.json"), scalars)
  return scalars


def backbone(grid, cell: Cell, celldir: str, specials):
  """`(family, config, params)` to fine-tune; params None when untrained."""
  config = cell_config(grid, cell)
  if not cell.pretrained:
    model_cfg = models.make_config(cell.model, cell.size,
                                   vocab_size=specials.vocab_size,
                                   **cell.model_args)
    return cell.model, model_cfg, None
  state, _ = ckpt_lib.restore_replicated(celldir, int(config.steps))
  objective = train_lib.build_objective(config, specials)
  return objective.backbone(state["params"])


def primary_score(metric: str, scores: dict[str, float], split: str) -> float:
  """The one number a task reports on `split`, from finetune's metrics.

  Regression averages Pearson and Spearman (as GLUE does for STS-B); span
  QA reports F1, summaries ROUGE-L; the rest report their metric by name.
  """
  if metric == "pearson_spearman":
    return 0.5 * (scores[f"{split}/pearson"] + scores[f"{split}/spearman"])
  key = f"{split}/" + {"squad": "f1", "rouge": "rougeL"}.get(metric, metric)
  if key not in scores:
    raise KeyError(f"fine-tuning returned no {key!r}; got {sorted(scores)}")
  return float(scores[key])


def finetune_runs(grid, cell: Cell, celldir: str, specials, tokenizer,
                  on_run=None) -> dict[str, list[dict]]:
  """Fine-tunes the cell on every task and seed, skipping finished runs.

  Args:
    grid, cell, celldir: the cell.
    specials, tokenizer: the vocabulary the cell was pre-trained with.
    on_run: called with a short label after each run (progress display).

  Returns:
    task -> one dict per seed: {"seed", "score", "metrics"}.
  """
  from zoo import finetune  # pylint: disable=import-outside-toplevel
  import data.tasks  # pylint: disable=import-outside-toplevel
  split = grid.get("report_split", "validation")
  recipe, loaded, out = _as_dict(grid.finetune), None, {}
  for task_name in grid.tasks:
    task, out[task_name] = None, []
    for seed in grid.seeds:
      path = os.path.join(celldir, "finetune", f"{task_name}.seed{seed}.json")
      run = read_json(path)
      if run is None:
        loaded = loaded or backbone(grid, cell, celldir, specials)
        task = task or data.tasks.load(task_name)
        metrics = finetune.finetune(*loaded, task, tokenizer, seed=int(seed),
                                    **recipe)
        run = {"seed": int(seed), "metric": task.metric, "metrics": metrics,
               "score": primary_score(task.metric, metrics, split)}
        write_json(path, run)
      out[task_name].append(run)
      if on_run is not None:
        on_run(f"{task_name} seed {seed}")
  return out


def run_cell(grid, cell: Cell, celldir: str, on_run=None) -> dict[str, Any]:
  """Pre-trains, fine-tunes and records one cell; returns its result.

  A cell whose `done.json` exists is read back, not rerun; one made under a
  different grid (another fingerprint) is an error rather than a silent mix.
  """
  key = fingerprint(grid, cell)
  done = read_json(os.path.join(celldir, DONE))
  if done is not None:
    if done.get("fingerprint") != key:
      raise ValueError(
          f"{celldir} holds cell {cell.name!r} of a different grid (config, "
          "recipe, tasks or seeds changed); use a new --workdir or delete "
          "that cell's directory")
    return done
  tokenizer = tokenizer_of(grid, celldir if cell.pretrained else None)
  specials = objectives.Specials(**tokenizer.specials())
  result = {"name": cell.name, "objective": cell.objective or "none",
            "model": cell.model, "size": cell.size, "t5_row": cell.t5_row,
            "fingerprint": key, "pretrain": {}}
  if cell.pretrained:
    result["pretrain"] = pretrain(grid, cell, celldir)
    result.update(flops_estimate(cell_config(grid, cell), specials))
  else:
    result.update(flops_per_token=0.0, tokens=0.0, flops_total=0.0)
  result["runs"] = finetune_runs(grid, cell, celldir, specials, tokenizer,
                                 on_run)
  write_json(os.path.join(celldir, DONE), result)
  return result
