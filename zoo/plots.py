"""The harness's PNG plots (matplotlib, Agg backend: no display needed)."""

import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=wrong-import-position
import numpy as np  # pylint: disable=wrong-import-position


def loss_curve(celldir: str) -> tuple[list[int], list[float]]:
  """(steps, train losses) of a cell's metrics.jsonl, one point per step.

  A resumed run logs again the steps after its last checkpoint; the later
  line wins, so the curve is the one the finished run followed.
  """
  path = os.path.join(celldir, "metrics.jsonl")
  if not os.path.exists(path):
    return [], []
  by_step = {}
  with open(path, encoding="utf-8") as f:
    for line in f:
      row = json.loads(line) if line.strip() else {}
      if row.get("split") == "train" and "loss" in row:
        by_step[int(row["step"])] = float(row["loss"])
  steps = sorted(by_step)
  return steps, [by_step[s] for s in steps]


def plot_losses(workdir: str, names: list[str], path: str,
                tokens_per_step: int) -> str:
  """Pre-training loss of every cell against tokens seen, on one chart."""
  fig, ax = plt.subplots(figsize=(7, 4.5))
  for name in names:
    steps, losses = loss_curve(os.path.join(workdir, "cells", name))
    if steps:
      ax.plot(np.array(steps) * tokens_per_step, losses, label=name)
  ax.set_xlabel("pre-training tokens")
  ax.set_ylabel("training loss (each objective's own)")
  ax.set_title("Pre-training loss at equal token budget")
  if ax.lines:
    ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path


def plot_tasks(rows: list[dict], tasks: list[str], path: str) -> str:
  """Grouped bars: one group per task (and the average), one bar per cell.

  Error bars are the standard deviation over fine-tuning seeds.
  """
  columns = list(tasks) + ["average"]
  fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(columns) * len(rows) / 3),
                                  4.5))
  width = 0.8 / len(rows)
  x = np.arange(len(columns))
  for i, row in enumerate(rows):
    stats = [row["tasks"][t] for t in tasks] + [row["average"]]
    ax.bar(x + (i - (len(rows) - 1) / 2) * width, [s[0] for s in stats],
           width, yerr=[s[1] for s in stats], capsize=2, label=row["name"])
  ax.set_xticks(x, columns)
  ax.set_ylabel("score (mean ± std over seeds)")
  ax.legend(fontsize=8, ncol=2)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path
