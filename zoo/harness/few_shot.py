"""Few-shot fine-tuning: K labelled examples per class, several sampled
training sets, one recipe for every family.

Each seed draws its own training set of K examples per class from the
task's train split; every cell of a grid draws the same sets, so its rows
are paired. Encoders train a mean-pooled classification head; encoder-
decoders and decoders train on the label words and are scored by rank
classification over the label strings (`zoo.finetune.rank`). Predictions
cover the whole evaluation split.

Letters: S seeds (training sets), N evaluation examples, C classes.
"""

import dataclasses

import numpy as np

from data.tasks import stable_key
from zoo import distributed
from zoo import finetune as finetune_lib

# Keys of a grid's `few_shot` block that are not `finetune()` arguments.
_OWN = ("k",)


def subset(task, k: int, seed: int) -> list[dict]:
  """K train examples of each class, drawn with `seed` (the same for every
  cell); classes with fewer than K examples give all they have."""
  rng = np.random.default_rng(seed)
  out = []
  for label in range(len(task.labels)):
    rows = sorted((ex for ex in task.train if ex["label"] == label),
                  key=lambda ex: stable_key(ex["text"]))
    take = rng.permutation(len(rows))[:k]
    out += [rows[i] for i in sorted(take)]
  order = rng.permutation(len(out))
  return [out[i] for i in order]


def with_train(task, train: list[dict]):
  """The task with its train split replaced."""
  return dataclasses.replace(task, splits={**task.splits, "train": train})


def _one(backbone: tuple, task, tokenizer, kwargs: dict, k: int, seed: int,
         split: str) -> dict:
  """One sampled training set: {"preds" [N], "losses" [steps]}."""
  shots = with_train(task, subset(task, k, seed))
  _, state = finetune_lib.finetune(*backbone, shots, tokenizer, seed=seed,
                                   splits=(split,), return_state=True,
                                   **kwargs)
  return {"preds": np.asarray(state.predictions[split]).tolist(),
          "losses": [float(x) for x in state.losses]}


def run_tasks(backbone: tuple, tasks: dict, tokenizer, recipe: dict, seeds,
              split: str) -> dict:
  """`run` of every task; the (task, seed) runs are dealt out across
  processes (`distributed.split_work`), each on one process's devices.

  Returns:
    task name -> `run`'s dict.
  """
  kwargs = {k: v for k, v in recipe.items() if k not in _OWN}
  units = [(name, int(seed)) for name in tasks for seed in seeds]
  done = distributed.split_work(
      lambda unit: _one(backbone, tasks[unit[0]], tokenizer, kwargs,
                        int(recipe["k"]), unit[1], split), units)
  out = {}
  for name, task in tasks.items():
    mine = [r for (n, _), r in zip(units, done) if n == name]
    out[name] = {"metric": task.metric,
                 "preds": [r["preds"] for r in mine],
                 "losses": [r["losses"] for r in mine],
                 "labels": [ex["label"] for ex in task.splits[split]]}
  return out


def run(backbone: tuple, task, tokenizer, recipe: dict, seeds, split: str
        ) -> dict:
  """Fine-tunes `backbone` on each seed's K-shot set and predicts `split`.

  Args:
    backbone: `(family, config, params)`; params None for a fresh init.
    task: a class task.
    tokenizer: the backbone's tokenizer.
    recipe: the grid's `few_shot` block: "k" plus keyword arguments of
      `zoo.finetune.finetune` (mode, steps, batch_size, lr, max_len, ...).
    seeds: the training sets (and fine-tuning seeds).
    split: the evaluation split.

  Returns:
    {"metric", "labels" [N], "preds" [S][N], "losses" [S][steps]}.
  """
  return run_tasks(backbone, {task.name: task}, tokenizer, recipe, seeds,
                   split)[task.name]
