"""What a pre-training budget buys: the harness's views along one run.

    python bench/learning_curve.py --objective clm --model gpt2 --passes 4
    python bench/learning_curve.py --objective mlm --model bert --passes 8 \\
        --vocab 8000 --workdir /tmp/curve_mlm

Pre-trains one cell of the demo recipe (`configs/compare/demo.py`: tiny
size, 32 x 128 rows, the same optimizer) for `--passes` passes over the
embedded sample, checkpointing every `--every` passes, then scores the
random init and every checkpoint with two of the harness's views: the
minimal-pairs average (`zoo.harness.minimal_pairs`) and the linear probe
(`zoo.harness.probe`) on `--tasks`. One JSON line per point; the last line
is a summary: the first token count at which the minimal-pairs average
is more than 5 points above the random init's, or "not reached".
The learning-rate schedule decays to the end of the whole run, so a
checkpoint is not the end of a shorter run. `--set key=value` changes the
pre-training recipe (`optimizer.lr=1e-3`, `model_args.dropout_rate=0`).
"""

import argparse
import json
import os
import pathlib
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

# pylint: disable=wrong-import-position
import numpy as np

import data
import data.minimal_pairs
import data.tasks
import objectives
from configs import common
from configs.compare import demo
from zoo import loading
from zoo.harness import cells as cells_lib
from zoo.harness import minimal_pairs, probe


def _grid(args):
  """A one-cell demo grid for `passes` passes, checkpointing `every`."""
  grid = demo.grid([(args.objective, args.objective, args.model, "")],
                   tasks=args.tasks, budget=1)
  grid.pretrain.data.vocab_size = args.vocab
  for item in args.set:
    _override(grid.pretrain, item, args.model)
  tok = data.load_tokenizer(grid.pretrain.data)
  corpus = cells_lib.corpus_tokens(grid, tok)
  grid.budget_tokens = int(args.passes * corpus)
  steps = cells_lib.budget_steps(grid)
  grid.pretrain.optimizer.warmup_steps = max(1, steps // 10)
  grid.pretrain.checkpoint_every = max(1, round(args.every * steps /
                                                args.passes))
  grid.pretrain.keep_checkpoints = 1000
  return grid, tok, corpus


def _override(config, item: str, family: str) -> None:
  """Applies `a.b=value` to `config` (`model_args.` keys may be new, typed
  as `family`'s Config field)."""
  key, sep, value = item.partition("=")
  *path, leaf = key.split(".")
  if not sep or not leaf:
    raise SystemExit(f"--set {item!r}: expected key=value")
  node = config
  for part in path:
    node = node[part]
  if path == ["model_args"] and leaf not in node:
    # Typed as the family's Config field ("false" is a bool, not a string).
    node[leaf] = common.typed(key, common._model_default(  # pylint: disable=protected-access
        family, leaf), value)
  elif leaf in node:
    node[leaf] = common.typed(key, node[leaf], value)
  else:
    raise SystemExit(f"--set {item!r}: {key} is not a config key")


def _views(loaded, pairs, tasks) -> dict:
  """Minimal-pairs average and probe accuracy per task."""
  view = minimal_pairs.run(loaded, pairs)
  out = {"minimal_pairs": float(np.mean([100 * np.mean(t["preds"][0]) for t
                                         in view["tasks"].values()]))}
  for name, task in tasks.items():
    res = probe.run(loaded, task, "validation", {"max_len": 64})
    out[name] = float(100 * np.mean(np.array(res["preds"][0]) ==
                                    np.array(res["labels"])))
  return {k: round(v, 1) for k, v in out.items()}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--objective", default="clm")
  parser.add_argument("--model", default="gpt2")
  parser.add_argument("--passes", type=float, default=4.0)
  parser.add_argument("--every", type=float, default=0.5)
  parser.add_argument("--vocab", type=int, default=demo.VOCAB)
  parser.add_argument("--tasks", nargs="+", default=["trec", "bbc_topic"])
  parser.add_argument("--workdir", default=None)
  parser.add_argument("--set", action="append", default=[],
                      help="a pre-training config override, key=value "
                      "(e.g. optimizer.lr=1e-3, model_args.dropout_rate=0)")
  args = parser.parse_args()
  grid, tok, corpus = _grid(args)
  cell = cells_lib.parse_cells(grid)[0]
  workdir = args.workdir or tempfile.mkdtemp(prefix="curve_")
  specials = objectives.Specials(**tok.specials())
  pairs = data.minimal_pairs.load(None, tok)
  tasks = {t: data.tasks.load(t) for t in args.tasks}
  random_cell = cells_lib.parse_cells(grid)[1]
  family, config, params = cells_lib.backbone(grid, random_cell, workdir,
                                              specials)
  base = _views(loading.Loaded(family, config, params, tok, None, "",
                               objective=args.objective), pairs, tasks)
  print(json.dumps({"tokens": 0, **base}), flush=True)
  cells_lib.pretrain(grid, cell, workdir, tok)
  points, tok_per_step = [], grid.pretrain.batch_size * grid.pretrain.seq_len
  for step in sorted(int(s) for s in os.listdir(
      os.path.join(workdir, "checkpoints")) if s.isdigit()):
    point = {"tokens": step * tok_per_step,
             "passes": round(step * tok_per_step / corpus, 2),
             **_views(loading.load(workdir, step), pairs, tasks)}
    points.append(point)
    print(json.dumps(point), flush=True)
  first = next((p for p in points if p["minimal_pairs"] >
                base["minimal_pairs"] + 5), None)
  print(f"{args.objective}/{args.model}: minimal pairs "
        f"{base['minimal_pairs']} at init, {points[-1]['minimal_pairs']} "
        f"after {points[-1]['passes']} passes; +5 points "
        + (f"at {first['passes']} passes" if first else "not reached"))


if __name__ == "__main__":
  main()
