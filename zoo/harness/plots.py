"""The harness's PNG plots (matplotlib, Agg backend: no display needed)."""

import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=wrong-import-position
import numpy as np  # pylint: disable=wrong-import-position

from zoo.harness import report  # pylint: disable=wrong-import-position


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


def _colors(rows: list[dict]) -> dict[str, str]:
  """One color per model family, in order of first appearance."""
  out = {}
  for row in rows:
    out.setdefault(row.get("model", "-"), f"C{len(out)}")
  return out


def plot_views(results: dict, path: str) -> str:
  """Grouped bars: one group per view, one bar per row (a family's color;
  its random-init row hatched) and the floor (grey), with the 95%
  interval as error bars."""
  rows = results["rows"] + [{"name": "floor", "model": "-",
                             "views": results["floors"]}]
  colors = _colors(results["rows"])
  views = report.VIEWS
  fig, ax = plt.subplots(figsize=(max(7, 0.5 * len(rows) * len(views)), 4.5))
  width = 0.8 / len(rows)
  x = np.arange(len(views))
  for i, row in enumerate(rows):
    stats = [row["views"].get(v, {}).get("average", [np.nan] * 3)
             for v in views]
    means = np.array([s[0] for s in stats])
    err = np.array([[s[0] - s[1] for s in stats], [s[2] - s[0] for s in stats]])
    ax.bar(x + (i - (len(rows) - 1) / 2) * width, means, width, yerr=err,
           capsize=2, label=row["name"], color=colors.get(row["model"], "0.6"),
           edgecolor="white",
           hatch="//" if row["name"].startswith("random_") else None)
  ax.set_xticks(x, ["minimal pairs", "linear probe", "few-shot"])
  ax.set_ylabel("score (95% interval)")
  ax.legend(fontsize=7, ncol=3)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path


def _mean_curve(losses: list[list[float]], smooth: int = 5) -> np.ndarray:
  """The seeds' mean loss per step, smoothed by a running mean."""
  curve = np.mean(np.asarray(losses, np.float64), axis=0)
  kernel = np.ones(min(smooth, len(curve))) / min(smooth, len(curve))
  return np.convolve(curve, kernel, mode="valid")


def plot_finetuning(records: list[dict], path: str) -> str:
  """Few-shot fine-tuning loss per task, each pre-trained row beside its
  family's random-init row (dashed): the "why pre-train" picture."""
  tasks = list(records[0]["views"]["few_shot"]["tasks"])
  fig, axes = plt.subplots(1, len(tasks), figsize=(4.5 * len(tasks), 3.8),
                           squeeze=False)
  colors = _colors(records)
  for rec in records:
    color = colors[rec["model"]]
    style = "--" if rec["objective"] == "none" else "-"
    for ax, task in zip(axes[0], tasks):
      losses = rec["views"]["few_shot"]["tasks"][task]["losses"]
      ax.plot(_mean_curve(losses), style, color=color, label=rec["name"],
              linewidth=1.2)
  for ax, task in zip(axes[0], tasks):
    ax.set_title(f"{task}: few-shot fine-tuning")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (mean of seeds)")
  axes[0][0].legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path


def plot_compression(results: dict, path: str) -> str | None:
  """Each view's average against megabytes on disk, one point per row
  with a footprint (the compression grid's accuracy against size)."""
  rows = [r for r in results["rows"] if r.get("footprint")]
  if not rows:
    return None
  fig, axes = plt.subplots(1, len(report.VIEWS), figsize=(13, 4))
  for ax, view in zip(axes, report.VIEWS):
    for r in rows:
      mean, low, high = r["views"][view]["average"]
      size = r["footprint"]["bytes"] / 1e6
      ax.errorbar([size], [mean], yerr=[[mean - low], [high - mean]],
                  fmt="o", capsize=3)
      ax.annotate(r["name"], (size, mean), fontsize=7,
                  textcoords="offset points", xytext=(4, 4))
    ax.set_xlabel("MB on disk")
    ax.set_title(view.replace("_", " "))
  axes[0].set_ylabel("average score (95% interval)")
  fig.suptitle(f"Accuracy against size (reference: "
               f"{results.get('compare_to')})")
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path
