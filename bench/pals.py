"""One encoder for many tasks: BERT and PALs against adapters and separate
fine-tunes, on the sample's classification tasks.

    python bench/pals.py --backbone WORKDIR [--tasks trec,bbc_topic,...]
        [--steps 300] [--seeds 3] [--pal_dim 16] [--adapter_dim 8]
        [--lr 1e-3] [--adapter_lr 1e-2]

From one pre-trained BERT-like workdir (`zoo.load`), four ways to serve
T tasks, on the same budget of `--steps` training steps per task (batch
16, rows of `--max_len` pieces, AdamW at `--lr` with 10% warmup and
linear decay):

- full: a separate fine-tune of the whole encoder per task;
- adapters: a separate run per task training bottleneck adapters
  (`--adapter_dim`) and the head, the encoder frozen and shared, at
  `--adapter_lr` (small modules from the identity take a larger rate:
  at the encoders' 1e-3 they stay far below it);
- pals: one multi-task run (`zoo.finetune.multitask`, T x `--steps`
  steps, annealed sampling) training the shared encoder, and per task its
  projected attention layers (`--pal_dim`) and head;
- heads: the same multi-task run with only a head per task.

Prints per row the params each task adds (full: the whole encoder and its
head), the params of all T tasks together (the shared encoder counted
once), and each task's validation
score (mean over seeds [min, max]) with their average; then a BENCH_JSON
record for `bench/report.py --block pals`.
"""

import argparse
import json
import time

import jax

import _common  # pylint: disable=g-bad-import-order
from data import tasks as tasks_lib
from zoo import finetune
from zoo import loading
from zoo.finetune import multitask as mt
from zoo.compress.heads import count_params
from zoo.models import heads

ROWS = ("full", "adapters", "pals", "heads")
TASKS = "trec,bbc_topic,sms_spam,rotten_tomatoes,movie_reply"


def parse_args(argv):
  """The command line."""
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--backbone", required=True,
                 help="a zoo workdir (or folder zoo.load reads) of a "
                 "BERT-like encoder")
  p.add_argument("--tasks", default=TASKS)
  p.add_argument("--rows", default=",".join(ROWS))
  p.add_argument("--steps", type=int, default=300, help="per task")
  p.add_argument("--seeds", type=int, default=3)
  p.add_argument("--lr", type=float, default=1e-3)
  p.add_argument("--adapter_lr", type=float, default=1e-2)
  p.add_argument("--max_len", type=int, default=64)
  p.add_argument("--pal_dim", type=int, default=16)
  p.add_argument("--adapter_dim", type=int, default=8)
  args = p.parse_args(argv)
  args.tasks = args.tasks.split(",")
  args.rows = args.rows.split(",")
  if not set(args.rows) <= set(ROWS):
    p.error(f"--rows {args.rows}: each one of {ROWS}")
  return args


def metric(scores: dict, task) -> float:
  """The task's validation score (its metric, in percent)."""
  return float(scores[f"validation/{task.metric}"])


def separate(loaded, tasks, mode, args, seed):
  """A run per task: ({task: score}, {task: params it adds}, shared: the
  frozen encoder adapters share, 0 for full runs)."""
  scores, added, shared = {}, {}, 0
  for name, task in tasks.items():
    got, state = finetune.finetune(
        loaded.family, loaded.config, loaded.params, task, loaded.tokenizer,
        mode=mode, seed=seed, steps=args.steps, batch_size=16,
        lr=args.lr if mode == "full" else args.adapter_lr,
        max_len=args.max_len, adapter_dim=args.adapter_dim, pool="mean",
        splits=("validation",), return_state=True)
    scores[name] = metric(got, task)
    if mode == "full":
      added[name] = count_params(state.params)
      continue
    backbone = state.params["backbone"]
    mine = [x for x, own in zip(
        jax.tree.leaves(backbone),
        jax.tree.leaves(heads.adapter_mask(backbone, train_head=False)))
            if own]
    added[name] = count_params(mine) + count_params(state.params["head"])
    shared = count_params(backbone) - count_params(mine)
  return scores, added, shared


def together(loaded, tasks, per_task, args, seed):
  """One multi-task run: ({task: score}, {task: params it adds}, shared)."""
  got, state = mt.finetune_many(
      loaded.family, loaded.config, loaded.params, tasks, loaded.tokenizer,
      per_task=per_task, pal_dim=args.pal_dim,
      steps=args.steps * len(tasks), batch_size=16, lr=args.lr,
      max_len=args.max_len, seed=seed, pool="mean")
  return ({n: metric(got[n], t) for n, t in tasks.items()},
          {n: state.added_params(n) for n in tasks}, count_params(state.shared))


def main(argv=None):
  args = parse_args(argv)
  loaded = loading.load(args.backbone)
  tasks = {n: tasks_lib.load(n) for n in args.tasks}
  runs = []
  for row in args.rows:
    for seed in range(args.seeds):
      start = time.time()
      if row in ("full", "adapters"):
        scores, added, shared = separate(loaded, tasks, row, args, seed)
      else:
        scores, added, shared = together(loaded, tasks, row, args, seed)
      run = dict(row=row, seed=seed, scores=scores, added=added,
                 shared=shared, seconds=time.time() - start)
      runs.append(run)
      print(json.dumps(run), flush=True)
  _common.emit_json("pals", dict(
      backbone=args.backbone, family=loaded.family, tasks=args.tasks,
      steps=args.steps, lr=args.lr, adapter_lr=args.adapter_lr,
      max_len=args.max_len,
      pal_dim=args.pal_dim, adapter_dim=args.adapter_dim, runs=runs,
      machine=_common.machine()))


if __name__ == "__main__":
  main()
