"""The cells of a comparison grid: checked, pre-trained, remembered.

A grid (`configs/compare/*.py`, `get_config(arg)`) is a ConfigDict:

  pretrain: one full training config (`configs.common.base_config()`)
    that every cell shares, so every cell reads the same rows.
  budget_tokens: pre-training tokens per cell; each cell trains
    `ceil(budget_tokens / (batch_size * seq_len))` steps and its learning
    rate schedule ends there.
  cells: a list of dicts, one per scheme: `name`, `objective` ("" for a
    random-init row), `model` (family), and optionally `size` (default
    `pretrain.size`), `objective_args`, `model_args`, `optimizer`
    (overrides of `pretrain.optimizer`, e.g. a `prune` block), `t5_row`
    ("<table>/<row>" of `configs.compare.t5_tables.PUBLISHED`), and the
    keys of compressed rows (`zoo.harness.compressed`): `source` (another
    cell whose backbone this row reads instead of pre-training) with
    `quant` ("int8"), and "@<cell>" in `objective_args` for another cell's
    workdir (a distillation teacher). Every family of the grid gets a
    random-init row (`random_<family>`) whether or not the grid lists one:
    the baseline its pre-trained rows are compared with. A row of another
    shape than its family's first (a narrower student) may name its own,
    `random_row` ("random_<anything>"): a fresh init of its model, made
    when the grid does not list it.
  tasks: downstream classification tasks (`data.tasks.names()`).
  seeds: few-shot training subsets (one fine-tuning run each).
  pretrain_seeds (optional): pre-training seeds, each a replica of every
    cell (`zoo.harness.seeds`); default `pretrain.seed` alone.
  minimal_pairs, probe, few_shot: the recipes of the three views
    (`zoo.harness.minimal_pairs`, `.probe`, `.few_shot`). `few_shot` may
    hold `by_family`: {family: fine-tuning arguments} that a family's
    rows, its random-init row included, fine-tune with on top of the rest
    (e.g. ULMFiT's head and recipe for `awd_lstm`).
  report_split: the evaluation split the tables show.

A cell's directory `DIR/cells/<name>/` is the trainer's workdir
(config.json, checkpoints/, metrics.jsonl, tokenizer/) plus
`pretrain.json` (final metrics, tokens, passes, wall time) and
`views/<view>.json`, one per finished evaluation view. Rerunning skips
what is on disk and resumes pre-training from the latest checkpoint.
"""

import dataclasses
import hashlib
import json
import math
import os
import time
from typing import Any

import flax.linen as nn
import jax
import ml_collections

import objectives
from zoo import checkpoint as ckpt_lib
from zoo import compile_cache
from zoo import distributed
from zoo import models
from zoo import scoring
from zoo import train as train_mod
from zoo import train_lib
from zoo.harness import compressed
from zoo.harness import seeds as seeds_lib
from zoo.metrics_log import read_metrics

_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789_-.")
GRID_KEYS = ("pretrain", "budget_tokens", "cells", "tasks", "seeds",
             "minimal_pairs", "probe", "few_shot")


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
  optimizer: dict = dataclasses.field(default_factory=dict)
  source: str = ""  # a cell whose trained backbone this row reads
  quant: str = ""  # "int8": the views read the backbone quantised
  # Pre-training data fields over the grid's (CoVe: {"source": "parallel"}).
  data: dict = dataclasses.field(default_factory=dict)
  random_row: str = ""  # its own random-init row, else the family's

  @property
  def pretrained(self) -> bool:
    """False for a random-init row (and a row reading another's)."""
    return bool(self.objective)

  @property
  def is_baseline(self) -> bool:
    """True for a family's random-init row."""
    return not self.objective and not self.source

  @property
  def baseline(self) -> str:
    """The name of the random-init row this row is compared with."""
    return self.random_row or f"random_{self.model}"


def _as_dict(value) -> dict:
  if value is None:
    return {}
  return value.to_dict() if hasattr(value, "to_dict") else dict(value)


def as_plain(value):
  """ConfigDicts (nested in dicts, lists or tuples) as plain JSON-able data."""
  if hasattr(value, "to_dict"):
    value = value.to_dict()
  if isinstance(value, dict):
    return {k: as_plain(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [as_plain(v) for v in value]
  return value


def parse_cells(grid) -> list[Cell]:
  """The grid's cells, checked, plus a random-init row per family.

  A listed cell without an objective is its family's random-init row and
  takes the name `random_<family>`; families without one get one, placed
  after the listed cells.

  Raises:
    ValueError: naming the first bad cell and what is wrong with it.
  """
  cells, seen = [], set()
  for i, raw in enumerate(grid.cells):
    cell = _parse_cell(grid, i, _as_dict(raw))
    if cell.name in seen:
      raise ValueError(f"grid cell name {cell.name!r} is repeated")
    seen.add(cell.name)
    cells.append(cell)
  if not cells:
    raise ValueError("the grid has no cells")
  compressed.check_refs(cells)
  for cell in list(cells):
    if cell.baseline not in seen:
      seen.add(cell.baseline)
      cells.append(Cell(cell.baseline, "", cell.model, cell.size, {},
                        dict(cell.model_args)))
  _check_random_rows(cells)
  return cells


def _check_random_rows(cells: list[Cell]) -> None:
  """Each row's baseline is a random-init row of its own family."""
  by_name = {c.name: c for c in cells}
  for cell in cells:
    base = by_name[cell.baseline]
    if cell.is_baseline and cell.random_row:
      raise ValueError(f"grid cell {cell.name!r} is a random-init row; "
                       "random_row belongs on the rows compared with one")
    if not base.is_baseline or base.model != cell.model:
      raise ValueError(
          f"grid cell {cell.name!r}: its random_row {cell.baseline!r} must "
          f"be a random-init row of family {cell.model!r} (no objective, "
          "no source)")


def _parse_cell(grid, i: int, raw: dict) -> Cell:
  """One grid entry as a `Cell` (random-init rows named for the family)."""
  unknown = set(raw) - {f.name for f in dataclasses.fields(Cell)}
  if unknown or "model" not in raw:
    raise ValueError(f"grid cell {i} ({raw}) has unknown keys "
                     f"{sorted(unknown)} or no 'model'")
  objective = raw.get("objective", "") or ""
  size = raw.get("size") or grid.pretrain.size
  name = raw.get("name") or f"{objective}_{raw['model']}_{size}"
  if not objective and not raw.get("source") and not (
      name.startswith("random_") and "name" in raw):
    name = f"random_{raw['model']}"
  if raw.get("random_row") and not str(raw["random_row"]).startswith(
      "random_"):
    raise ValueError(f"grid cell {name!r}: random_row "
                     f"{raw['random_row']!r} must start with 'random_'")
  if not set(name) <= _NAME_CHARS:
    raise ValueError(f"grid cell name {name!r} is not made of lower-case "
                     "letters, digits, '_', '-', '.'")
  if objective and objective not in objectives.names():
    raise ValueError(f"grid cell {name!r}: objective {objective!r} is not "
                     f"registered; registered: {objectives.names()}")
  if raw["model"] not in models.families():
    raise ValueError(f"grid cell {name!r}: unknown model family "
                     f"{raw['model']!r}; known: {models.families()}")
  return Cell(name, objective, raw["model"], size,
              _as_dict(raw.get("objective_args")),
              _as_dict(raw.get("model_args")), raw.get("t5_row", "") or "",
              _as_dict(raw.get("optimizer")), raw.get("source", "") or "",
              raw.get("quant", "") or "", _as_dict(raw.get("data")),
              raw.get("random_row", "") or "")


def check_grid(grid) -> list[Cell]:
  """Validates the whole grid before anything runs; returns its cells."""
  import data.tasks  # pylint: disable=import-outside-toplevel
  for key in GRID_KEYS:
    if key not in grid:
      raise ValueError(f"the grid config lacks the key {key!r}")
  unknown = sorted(set(grid.tasks) - set(data.tasks.names()))
  if unknown or not grid.tasks:
    raise ValueError(f"grid tasks {list(grid.tasks)}: unknown {unknown}; "
                     f"known: {data.tasks.names()}")
  kinds = {t: data.tasks.load(t).kind for t in grid.tasks}
  if any(k != "class" for k in kinds.values()):
    raise ValueError(f"the harness's views classify; tasks {kinds} must all "
                     "be of kind 'class'")
  if not grid.seeds or len(set(grid.seeds)) != len(grid.seeds):
    raise ValueError(f"grid seeds {list(grid.seeds)} must be distinct and "
                     "at least one")
  seeds_lib.seeds_of(grid)  # distinct integers
  cells = parse_cells(grid)
  extra = set(as_plain(grid.few_shot).get("by_family", {}))
  if extra - {c.model for c in cells}:
    raise ValueError(f"few_shot.by_family names families "
                     f"{sorted(extra - {c.model for c in cells})} that no "
                     f"cell of the grid uses")
  if int(grid.budget_tokens) <= 0:
    raise ValueError(f"budget_tokens {grid.budget_tokens} must be positive")
  if grid.pretrain.data.source == "synthetic":
    raise ValueError("the harness evaluates on real text, so pre-training "
                     "needs a real text source with a tokenizer, not "
                     "'synthetic'")
  return cells


def budget_steps(grid) -> int:
  """Pre-training steps that spend the grid's token budget (rounded up)."""
  per_step = int(grid.pretrain.batch_size) * int(grid.pretrain.seq_len)
  return max(1, -(-int(grid.budget_tokens) // per_step))


def model_args(grid, cell: Cell) -> dict:
  """The cell's model Config overrides: the grid's `pretrain.model_args`
  (every cell's), then the cell's own, which win."""
  return {**_as_dict(grid.pretrain.get("model_args")), **cell.model_args}


def cell_config(grid, cell: Cell) -> ml_collections.ConfigDict:
  """The cell's training config: the shared `pretrain` with its scheme,
  trained for the budget's steps (the schedule's decay ends there)."""
  config = ml_collections.ConfigDict(grid.pretrain.to_dict())
  config.model, config.size = cell.model, cell.size
  config.objective = cell.objective or "none"
  config.objective_args = ml_collections.ConfigDict(cell.objective_args)
  config.model_args = ml_collections.ConfigDict(model_args(grid, cell))
  config.steps = budget_steps(grid)
  config.optimizer.decay_steps = -1
  for key, value in cell.optimizer.items():
    config.optimizer[key] = value
  for key, value in cell.data.items():
    if key not in config.data:
      raise ValueError(f"grid cell {cell.name!r}: unknown data field "
                       f"{key!r}; known: {sorted(config.data.keys())}")
    config.data[key] = value
  return config


def fingerprint(*parts) -> str:
  """A short hash of JSON-able parts (what a result depends on)."""
  text = json.dumps([as_plain(p) for p in parts], sort_keys=True,
                    default=str)
  return hashlib.sha256(text.encode()).hexdigest()[:16]


def read_json(path: str):
  """A JSON file's value, or None when it does not exist."""
  if not os.path.exists(path):
    return None
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def write_json(path: str, value) -> None:
  """Writes JSON atomically: a killed run never leaves half a file. Only
  process 0 writes (every process holds the same value)."""
  if not distributed.is_main():
    return
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
  Training costs three forward passes (forward plus backward); a frozen
  network (a distillation teacher, `Objective.frozen`) one.

  Returns:
    {"flops_per_token", "tokens", "flops_total", "params"} as floats.
  """
  objective = train_lib.build_objective(config, specials)
  seq_len = int(config.seq_len)
  shapes = jax.eval_shape(objective.init, jax.random.key(0),
                          train_lib.example_batch(seq_len))
  unboxed = nn.meta.unbox(shapes)
  frozen = {k: v for k, v in unboxed.items() if k in objective.frozen}
  trained = {k: v for k, v in unboxed.items() if k not in objective.frozen}
  matmul, vocab_proj, total = _matmul_sizes(trained, specials.vocab_size)
  frozen_matmul, frozen_proj, frozen_total = _matmul_sizes(
      frozen, specials.vocab_size)
  model_cfg = objective.backbone(nn.meta.unbox(shapes))[1]
  layers = getattr(model_cfg, "num_layers", 0) or 0
  embed = getattr(model_cfg, "embed_dim", 0) or 0
  stacks = 2 if objective.interface == "encdec" else 1
  forward = 2 * (matmul + vocab_proj) + 4 * stacks * layers * seq_len * embed
  per_token = 3.0 * forward + 2.0 * (frozen_matmul + frozen_proj)
  if hasattr(objective, "flops_per_token"):  # no matmul-shaped model
    per_token = float(objective.flops_per_token())
  tokens = float(int(config.steps) * int(config.batch_size) * seq_len)
  return {"flops_per_token": per_token, "tokens": tokens,
          "flops_total": per_token * tokens,
          "params": float(total + frozen_total)}


def _matmul_sizes(params, vocab: int) -> tuple[int, int, int]:
  """(weights of matmuls, the largest vocabulary projection, all weights)
  of a param tree; position tables and vectors are no matmuls."""
  matmul, vocab_proj, total = 0, 0, 0
  for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
    size = math.prod(leaf.shape)
    total += size
    is_position = "pos" in jax.tree_util.keystr(path).lower()
    if len(leaf.shape) < 2 or is_position:
      continue
    if vocab in leaf.shape:
      vocab_proj = max(vocab_proj, size)
    else:
      matmul += size
  return matmul, vocab_proj, total


def tokenizer_of(grid, celldir: str | None = None):
  """The cell's saved tokenizer, else the one the grid's data names."""
  import data  # pylint: disable=import-outside-toplevel
  from data import tokenizer as tok_lib  # pylint: disable=import-outside-toplevel
  saved = os.path.join(celldir, "tokenizer") if celldir else ""
  if saved and os.path.isdir(saved):
    return tok_lib.load_path(saved)
  return data.load_tokenizer(grid.pretrain.data)


def corpus_tokens(grid, tokenizer) -> int | None:
  """Tokens of one pass over the pre-training split (the embedded sample's
  training documents), or None for other sources."""
  if grid.pretrain.data.source != "sample":
    return None
  from data import sample  # pylint: disable=import-outside-toplevel
  folder = grid.pretrain.data.sample_dir or sample.default_dir()
  return sample.train_token_count(folder, tokenizer)


def pretrain(grid, cell: Cell, celldir: str, tokenizer) -> dict[str, Any]:
  """Pre-trains the cell (resuming); returns its record: final train
  metrics, "tokens", "passes" over the corpus, "seconds" of wall time and
  "compile_seconds" of it spent compiling."""
  path = os.path.join(celldir, "pretrain.json")
  done = read_json(path)
  if done is not None:
    return done
  config = compressed.resolve(cell_config(grid, cell), celldir)
  start, compiling = time.time(), compile_cache.compile_seconds()
  final = train_mod.train(config, celldir)
  if "loss" not in final:  # killed after its last save: the last log line
    rows = read_metrics(celldir, "train")
    final = rows[-1] if rows else final
  record = {k: float(v) for k, v in final.items()
            if isinstance(v, (int, float))
            and k not in train_mod.SPEED_KEYS + ("time",)}
  tokens = int(config.steps) * int(config.batch_size) * int(config.seq_len)
  # Passes over the grid's corpus; a cell reading other text has none.
  corpus = 0 if cell.data else corpus_tokens(grid, tokenizer)
  record.update(tokens=float(tokens), seconds=time.time() - start,
                passes=tokens / corpus if corpus else None,
                compile_seconds=compile_cache.compile_seconds() - compiling)
  write_json(path, record)
  return record


def scorings(grid, cell: Cell) -> tuple[str, ...]:
  """For a random-init row: the sentence scorings (`zoo.scoring.method`)
  of its family's pre-trained rows other than its own default, sorted.
  The row is read each of those ways too, so that every pre-trained row
  is paired with its random init read alike (an encoder-decoder is read
  as its scheme corrupts)."""
  if not cell.is_baseline:
    return ()
  config = models.make_config(cell.model, cell.size, **model_args(grid, cell))
  try:
    default = scoring.method(cell.model, config)
  except ValueError:
    return ()  # no sentence score: the view says why
  found = {scoring.method(c.model, config, c.objective)
           for c in parse_cells(grid)
           if c.pretrained and c.baseline == cell.name}
  return tuple(sorted(found - {default}))


def backbone(grid, cell: Cell, celldir: str, specials):
  """`(family, config, params)` a cell's views read.

  A family's random-init row is the backbone its first pre-trained cell
  would start from (same objective, same config, the grid's seed), so
  the pair differs only in pre-training; a family with no pre-trained
  cell, and a row's own `random_row` (whose scheme may start from a
  teacher's layers), start from `models.init_params`, with the model
  settings of the scheme (`objectives.model_overrides`).
  """
  if cell.source:
    source = next(c for c in parse_cells(grid) if c.name == cell.source)
    return backbone(grid, source, compressed.cell_dir(celldir, source.name),
                    specials)
  if cell.pretrained:
    config = cell_config(grid, cell)
    state, _ = ckpt_lib.restore_replicated(celldir, int(config.steps))
    return train_lib.build_objective(config, specials).backbone(
        state["params"])
  refs = [c for c in parse_cells(grid)
          if c.pretrained and c.baseline == cell.name]
  if not refs or cell.name != f"random_{cell.model}":
    overrides = (objectives.model_overrides(refs[0].objective, cell.model)
                 if refs else {})
    config = models.make_config(cell.model, cell.size,
                                vocab_size=specials.vocab_size,
                                **{**overrides, **model_args(grid, cell)})
    params = models.init_params(cell.model, config,
                                jax.random.key(int(grid.pretrain.seed)))
    return cell.model, config, _as_restored(params)
  config = cell_config(grid, refs[0])
  objective = train_lib.build_objective(config, specials)
  return objective.backbone(_as_restored(_first_params(objective, config)))


def _first_params(objective, config):
  """The params a pre-trained cell's training starts from: its trainer's
  init (the same key, `train_lib.init_rng`, and example row), one jitted
  program as the trainer's is."""
  example = train_lib.example_batch(int(config.seq_len), data_cfg=config.data)
  init = jax.jit(lambda rng: nn.meta.unbox(objective.init(rng, example)),
                 compiler_options=models.INIT_COMPILER_OPTIONS)
  return init(train_lib.init_rng(int(config.seed)))


def _as_restored(params):
  """A random init placed as a restored checkpoint is, so a random-init
  row runs the programs its pre-trained rows compiled."""
  return jax.device_put(params, ckpt_lib.replicated())
