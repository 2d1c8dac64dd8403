"""The harness's tables: results.md, results.csv and results.json.

A row per cell (scheme), a column per task plus the average, each entry the
mean +- sample standard deviation over fine-tuning seeds. The average is
taken per seed over tasks first, so its spread is the spread of whole runs.
Where a cell mirrors a row of the T5 paper (`t5_row`), that paper's
published figures are printed beside ours, labelled as the paper's.
"""

import csv
import json
import math
import os

# Where a table mirrors the T5 paper, credit it under the table.
CITATION = ("T5 paper columns: published figures of Raffel et al. 2020, "
            "\"Exploring the Limits of Transfer Learning with a Unified "
            "Text-to-Text Transformer\" (T5-base, 2^35 tokens, GLUE, SQuAD "
            "and SuperGLUE dev averages), not results of this zoo.")


def _mean_std(values: list[float]) -> tuple[float, float]:
  """Mean and sample standard deviation (0 for a single value)."""
  n = len(values)
  mean = sum(values) / n
  if n < 2:
    return mean, 0.0
  return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))


def summarize(results: list[dict], tasks: list[str],
              published: dict | None = None) -> list[dict]:
  """Per-cell rows: {"name", ..., "tasks": {task: (mean, std)}, "average"}.

  Args:
    results: `compare_lib.run_cell` results, in grid order.
    tasks: the task columns, in order.
    published: "<table>/<row>" -> the T5 paper's figures, for the cells
      that name a `t5_row`.
  """
  published = published or {}
  rows = []
  for res in results:
    per_task = {t: [r["score"] for r in res["runs"][t]] for t in tasks}
    per_seed = [sum(per_task[t][i] for t in tasks) / len(tasks)
                for i in range(len(per_task[tasks[0]]))]
    rows.append({
        "name": res["name"], "objective": res["objective"],
        "model": res["model"], "size": res["size"],
        "t5_row": res.get("t5_row", ""),
        "published": published.get(res.get("t5_row", "")),
        "flops_per_token": res["flops_per_token"],
        "flops_total": res["flops_total"],
        "pretrain_loss": res["pretrain"].get("loss"),
        "tasks": {t: _mean_std(per_task[t]) for t in tasks},
        "scores": per_task,
        "average": _mean_std(per_seed)})
  return rows


def _fmt(mean_std) -> str:
  return f"{mean_std[0]:.2f} ± {mean_std[1]:.2f}"


def _flops(x: float) -> str:
  return "0" if not x else f"{x:.2e}"


def _published(row: dict) -> str:
  """The T5 paper's GLUE / SQuAD / SuperGLUE for a mirrored row."""
  fig = row.get("published")
  if not fig:
    return ""
  return f"{fig['GLUE']:.2f} / {fig['SQuAD']:.2f} / {fig['SGLUE']:.2f}"


def markdown(rows: list[dict], tasks: list[str], metrics: dict[str, str],
             split: str) -> str:
  """The results table as GitHub markdown, with a legend under it."""
  t5 = any(r.get("published") for r in rows)
  head = (["scheme", "objective", "model", "FLOPs/token", "FLOPs total"]
          + [f"{t} ({metrics[t]})" for t in tasks] + ["average"]
          + (["T5 paper: GLUE / SQuAD / SGLUE"] if t5 else []))
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for r in rows:
    cells = ([r["name"], r["objective"], r["model"],
              _flops(r["flops_per_token"]), _flops(r["flops_total"])]
             + [_fmt(r["tasks"][t]) for t in tasks] + [_fmt(r["average"])]
             + ([_published(r)] if t5 else []))
    lines.append("| " + " | ".join(cells) + " |")
  seeds = len(rows[0]["scores"][tasks[0]])
  lines += ["", f"Scores on the {split} split, mean ± std over {seeds} "
            "fine-tuning seeds. FLOPs are an analytic estimate of "
            "pre-training cost (see `zoo.compare_lib.flops_estimate`); "
            "objective `none` is the no-pre-training baseline."]
  if t5:
    lines.append(CITATION)
  return "\n".join(lines) + "\n"


def write_csv(path: str, rows: list[dict], tasks: list[str]) -> None:
  """One line per cell: identity, FLOPs, then mean and std per column."""
  cols = ["name", "objective", "model", "size", "flops_per_token",
          "flops_total", "pretrain_loss"]
  with open(path, "w", newline="", encoding="utf-8") as f:
    out = csv.writer(f)
    out.writerow(cols + [f"{t}_{s}" for t in tasks + ["average"]
                         for s in ("mean", "std")])
    for r in rows:
      stats = [r["tasks"][t] for t in tasks] + [r["average"]]
      out.writerow([r[c] for c in cols]
                   + [f"{v:.6g}" for ms in stats for v in ms])


def write_all(workdir: str, rows: list[dict], tasks: list[str],
              metrics: dict[str, str], split: str) -> str:
  """Writes results.{md,csv,json} into `workdir`; returns the markdown."""
  text = markdown(rows, tasks, metrics, split)
  with open(os.path.join(workdir, "results.md"), "w", encoding="utf-8") as f:
    f.write(text)
  write_csv(os.path.join(workdir, "results.csv"), rows, tasks)
  payload = {"tasks": tasks, "metrics": metrics, "split": split,
             "rows": rows}
  with open(os.path.join(workdir, "results.json"), "w",
            encoding="utf-8") as f:
    json.dump(payload, f, indent=1, sort_keys=True)
  return text


def read(workdir: str) -> dict:
  """The results.json of a harness workdir."""
  path = os.path.join(workdir, "results.json")
  if not os.path.exists(path):
    raise FileNotFoundError(f"{workdir} has no results.json; has the harness "
                            "finished there?")
  with open(path, encoding="utf-8") as f:
    return json.load(f)
