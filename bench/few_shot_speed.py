"""Few-shot runs as `zoo.finetune` runs them against a plain reference.

    python bench/few_shot_speed.py [--rows random_t5,random_bert,random_gpt2]
        [--turns 3] [--core 0]

Every (task, seed) few-shot run of the demo grid's recipe on each row's
backbone (random-init rows: nothing to pre-train first), in one process
pinned to one core as a demo worker runs, two ways in turns:
- `zoo`: what `zoo.finetune` runs: the train steps scanned in one
  compiled program per run of up to 64 steps (`steps.train_steps`), and
  rank classification that encodes each batch of an encoder-decoder's
  inputs once for all its label strings, and reads a decoder's prompt
  once with every label after it (`rank.shared_log_probs`);
- `reference`: one jitted train step per batch from a Python loop, and
  one whole forward pass per label string.
Both must give the same predictions and losses (checked on every turn).
The first turn of each compiles and is not timed; the last line gives
reference/zoo per row, the median over the timed turns.
"""

import argparse
import contextlib
import os
import statistics
import time

import _common  # pylint: disable=g-bad-import-order

import jax
import numpy as np

from configs.compare import demo
from zoo.finetune import rank
from zoo.finetune import run as ft_run
from zoo.finetune import steps as ft_steps
from zoo.harness import cells as cells_lib
from zoo.harness import few_shot
from zoo.harness import run as harness_run

_one_step = jax.jit(ft_steps.train_step, static_argnums=0,
                    static_argnames="prune")


def _looped(spec, params, arrays, batch_size, seed, prune=None):
  """The reference training loop: one jitted step per batch."""
  keys = ft_run.train_keys(arrays)
  index = ft_run.batch_rows(len(arrays[keys[0]]), spec.steps, batch_size,
                            seed)
  params, opt = ft_run.placed(
      params, ft_steps.init_opt_state(spec, params, prune))
  rng, losses = jax.random.key(seed), []
  for step, rows in enumerate(index):
    params, opt, loss = _one_step(spec, params, opt,
                                  {k: arrays[k][rows] for k in keys},
                                  jax.random.fold_in(rng, step), prune=prune)
    losses.append(loss)
  return params, [float(x) for x in jax.device_get(losses)]


def _per_label(spec, params, columns, batch_size, length_norm):
  """The reference label scores: a whole forward pass per label string."""
  keys = [k for k in columns[0] if k != "prompt"]
  out = []
  for arrays in columns:
    scores = [rank._scores(rank.target_log_probs(spec, params, b),  # pylint: disable=protected-access
                           length_norm)[:real]
              for real, b in rank.arrays_lib.chunks(arrays, keys, batch_size)]
    out.append(np.concatenate(scores))
  return np.stack(out, 1)


@contextlib.contextmanager
def reference():
  """`zoo.finetune` with the reference loop and label scoring."""
  saved = ft_run._train, rank._row_scores, rank._shares_prompt  # pylint: disable=protected-access
  ft_run._train, rank._row_scores = _looped, _per_label  # pylint: disable=protected-access
  rank._shares_prompt = lambda spec: False  # pylint: disable=protected-access
  try:
    yield
  finally:
    ft_run._train, rank._row_scores, rank._shares_prompt = saved  # pylint: disable=protected-access


def _row(grid, inputs, cell, turns: int) -> dict:
  """Seconds of every few-shot run of one row, each way, in turns."""
  backbone = cells_lib.backbone(grid, cell, None, inputs.specials)
  recipe = harness_run.view_recipe(grid, cell, "few_shot")
  kw = {k: v for k, v in recipe.items() if k != "k"}

  def runs():
    start = time.perf_counter()
    out = [few_shot._one(backbone, inputs.tasks[t], inputs.tokenizer, kw,  # pylint: disable=protected-access
                         recipe["k"], s, "validation")
           for t in grid.tasks for s in grid.seeds]
    return time.perf_counter() - start, out

  times = {"zoo": [], "reference": []}
  for turn in range(turns + 1):
    with reference():
      seconds, expected = runs()
    times["reference"].append(seconds)
    seconds, got = runs()
    times["zoo"].append(seconds)
    if got != expected:
      raise AssertionError(f"{cell.name}: predictions or losses differ")
  return {way: statistics.median(t[1:]) for way, t in times.items()}


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--rows", default="random_t5,random_bert,random_gpt2")
  p.add_argument("--turns", type=int, default=3)
  p.add_argument("--core", type=int, default=0)
  args = p.parse_args()
  os.sched_setaffinity(0, {args.core})
  grid = demo.get_config()
  inputs = harness_run._Inputs(grid)  # pylint: disable=protected-access
  cells = {c.name: c for c in cells_lib.parse_cells(grid)}
  runs = len(grid.tasks) * len(grid.seeds)
  result = {}
  for name in args.rows.split(","):
    t = _row(grid, inputs, cells[name], args.turns)
    result[name] = dict(t, ratio=t["reference"] / t["zoo"])
    print(f"{name}: {runs} runs, reference {t['reference']:.1f} s, zoo "
          f"{t['zoo']:.1f} s, reference/zoo {result[name]['ratio']:.2f}",
          flush=True)
  _common.emit_json("few_shot_speed", {"machine": _common.machine(),
                                       "runs": runs, "turns": args.turns,
                                       "results": result})


if __name__ == "__main__":
  main()
