"""The harness's tables: results.json, results.md, results.csv, and the
README section made from results.json.

Every figure is a point value with its 95% bootstrap interval over
evaluation examples and seeds (`zoo.harness.statistics`). Each row's view
average is the mean over that view's tasks (phenomena for minimal pairs);
each pre-trained row also shows its paired difference from its own
family's random-init row (the same examples, seeds and resamples), marked
`*` when the interval excludes zero. Rows that mirror the T5 paper carry
its published figures, and Kendall's tau between our order and the
paper's is printed with its interval.

    python -m zoo.harness.report DIR [--readme README.md [--block NAME]]
"""

import argparse
import csv
import json
import os
import zlib

import numpy as np

from zoo.harness import profile as profile_lib
from zoo.harness import statistics as stats

VIEWS = ("minimal_pairs", "probe", "few_shot")
TITLES = {"minimal_pairs": "minimal pairs", "probe": "linear probe",
          "few_shot": "few-shot"}
CITATION = ("T5 paper column: published GLUE averages of Raffel et al. "
            "2020, \"Exploring the Limits of Transfer Learning with a Unified "
            "Text-to-Text Transformer\" (T5-base, 2^35 tokens), not results "
            "of this zoo; only the order of rows is compared.")
README_BLOCK = "results"  # the README's <!-- results:start --> ... end block


def _seed(item: str) -> int:
  """The resampling seed of an item: the same for every row (pairing)."""
  return zlib.crc32(item.encode())


def _item(result: dict, item: str) -> tuple[stats.Interval, np.ndarray]:
  """Interval and replicates of one task (or phenomenon) of a view."""
  preds = np.asarray(result["preds"], np.float64)
  labels = result.get("labels")
  labels = np.asarray(labels) if labels is not None else None
  return stats.summarize(preds, labels, result["metric"], seed=_seed(item))


def view_summary(view_result: dict) -> dict:
  """{"items": {item: Interval}, "average": Interval, "reps": [B]}."""
  items, parts = {}, []
  for item, result in view_result["tasks"].items():
    iv, reps = _item(result, item)
    items[item] = iv
    parts.append((iv.mean, reps))
  avg, reps = stats.average(parts)
  return {"items": items, "average": avg, "reps": reps}


def _row(record: dict) -> dict:
  """A results row: identity, pre-training record, view summaries."""
  return {"name": record["name"], "objective": record["objective"],
          "model": record["model"], "size": record["size"],
          "baseline": record["baseline"], "t5_row": record.get("t5_row", ""),
          "pretrain": record["pretrain"],
          "flops_total": record.get("flops_total", 0.0),
          "flops_per_token": record.get("flops_per_token", 0.0),
          "seconds": record["seconds"],
          "footprint": record["views"].get("footprint"),
          "scoring": record["views"]["minimal_pairs"].get("method", ""),
          "views": {v: view_summary(record["views"][v]) for v in VIEWS},
          # Why a view does not apply to the row ("n/a" in the tables).
          "skipped": {v: record["views"][v]["skipped"] for v in VIEWS
                      if record["views"][v].get("skipped")},
          # A random-init row read as other rows of its family are.
          "read_as": {v.partition("@")[2]: view_summary(result)
                      for v, result in record["views"].items()
                      if v.startswith("minimal_pairs@")}}


def _deltas(rows: list[dict]) -> None:
  """Adds each pre-trained row's paired difference from its baseline."""
  by_name = {r["name"]: r for r in rows}
  for row in rows:
    base = by_name.get(row["baseline"])
    for view, summary in row["views"].items():
      summary["delta"] = None
      if row["objective"] != "none" and base is not None:
        other = base["views"][view]
        if view == "minimal_pairs":  # the random init read alike
          other = base["read_as"].get(row["scoring"], other)
        summary["delta"] = stats.paired(
            (summary["average"].mean, summary["reps"]),
            (other["average"].mean, other["reps"]))


def _vs_reference(rows: list[dict], name: str) -> None:
  """Adds each row's paired difference from row `name` (a compression
  grid's teacher) as `vs_reference` of every view."""
  by_name = {r["name"]: r for r in rows}
  if name not in by_name:
    raise ValueError(f"compare_to names {name!r}, which is not a row; rows: "
                     f"{sorted(by_name)}")
  ref = by_name[name]
  for row in rows:
    for view, summary in row["views"].items():
      other = ref["views"][view]
      summary["vs_reference"] = None if row is ref else stats.paired(
          (summary["average"].mean, summary["reps"]),
          (other["average"].mean, other["reps"]))


def _kendall(rows: list[dict], published: dict) -> dict | None:
  """Tau between the few-shot order of mirrored rows and the paper's."""
  mirrored = [r for r in rows if r["t5_row"] in published]
  if len(mirrored) < 3:
    return None
  reference = [published[r["t5_row"]]["GLUE"] for r in mirrored]
  values = [r["views"]["few_shot"]["average"].mean for r in mirrored]
  reps = np.stack([r["views"]["few_shot"]["reps"] for r in mirrored], 1)
  tau = stats.tau_interval(reps, reference, values)
  return {"view": "few_shot", "rows": [r["name"] for r in mirrored],
          "tau": tau.to_json()}


def build(grid, records: list[dict], floors: dict,
          latency: dict | None = None) -> dict:
  """The results of a grid run as plain JSON-able data (`latency`: row ->
  milliseconds of one forward, for the compression table)."""
  rows = [_row(r) for r in records]
  _deltas(rows)
  reference = grid.get("compare_to", "") or ""
  if reference:
    _vs_reference(rows, reference)
  published = grid.get("published", {})
  published = published.to_dict() if hasattr(published, "to_dict") else dict(
      published)
  floor_views = {v: view_summary(floors[v]) for v in VIEWS if v in floors}
  out = {"tasks": list(grid.tasks), "seeds": list(grid.seeds),
         "split": grid.get("report_split", "validation"),
         "budget_tokens": int(grid.budget_tokens),
         "phenomena": sorted(records[0]["views"]["minimal_pairs"]["tasks"]),
         "metrics": {t: r["metric"] for t, r in
                     records[0]["views"]["probe"]["tasks"].items()},
         "rows": [_plain(r) for r in rows],
         "floors": {v: _plain_view(s) for v, s in floor_views.items()},
         "published": {r["t5_row"]: published[r["t5_row"]] for r in rows
                       if r["t5_row"] in published},
         "kendall": _kendall(rows, published),
         "compare_to": reference,
         "profile": profile_lib.of(records, floors)}
  if reference:
    out["latency"] = latency or {}
  pretrain_seeds = list(grid.get("pretrain_seeds") or [])
  if len(pretrain_seeds) > 1:
    out["pretrain_seeds"] = pretrain_seeds
  return out


def _plain_view(summary: dict) -> dict:
  """A view summary with intervals as [mean, low, high] lists."""
  delta = summary.get("delta")
  ref = summary.get("vs_reference")
  out = {"items": {k: v.to_json() for k, v in summary["items"].items()},
         "average": summary["average"].to_json(),
         "delta": delta.to_json() if delta is not None else None,
         "delta_excludes_zero": bool(delta.excludes_zero) if delta else None}
  if ref is not None:
    out["vs_reference"] = ref.to_json()
    out["vs_reference_excludes_zero"] = bool(ref.excludes_zero)
  return out


def _plain(row: dict) -> dict:
  return dict({k: v for k, v in row.items() if k not in ("views", "read_as")},
              views={v: _plain_view(s) for v, s in row["views"].items()},
              read_as={h: _plain_view(s) for h, s in row["read_as"].items()})


def _iv(x) -> str:
  """`62.3 [58.1, 66.0]` of a [mean, low, high] list ("n/a" when the view
  does not apply to the row: NaN)."""
  if not np.isfinite(x[0]):
    return "n/a"
  return f"{x[0]:.1f} [{x[1]:.1f}, {x[2]:.1f}]"


def _delta(view: dict) -> str:
  """`+4.1 [1.2, 7.0]*` (the star: the interval excludes zero)."""
  d = view.get("delta")
  if d is None or not np.isfinite(d[0]):
    return ""
  star = "*" if view["delta_excludes_zero"] else ""
  return f"{d[0]:+.1f} [{d[1]:+.1f}, {d[2]:+.1f}]{star}"


def _budget(row: dict) -> str:
  """`1.70M tok, 1.0 passes, 45 s` of a pre-trained row."""
  pre = row["pretrain"]
  if not pre:  # a random-init row, or one reading another's ("int8 of x")
    return "random init" if row["objective"] == "none" else row["objective"]
  passes = f", {pre['passes']:.2f} passes" if pre.get("passes") else ""
  passes += f", {pre['seeds']} seeds" if pre.get("seeds") else ""
  tokens = pre["tokens"]
  size = f"{tokens / 1e6:.2f}M" if tokens >= 1e5 else f"{tokens / 1e3:.1f}k"
  return f"{size} tokens{passes}, {pre['seconds']:.0f} s"


def main_table(results: dict) -> list[str]:
  """One line per row: budget, and each view's average with its delta."""
  head = ["row", "model", "pre-training"]
  for v in VIEWS:
    head += [TITLES[v], "Δ vs random"]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for r in results["rows"]:
    cells = [r["name"], r["model"], _budget(r)]
    for v in VIEWS:
      cells += [_iv(r["views"][v]["average"]), _delta(r["views"][v])]
    lines.append("| " + " | ".join(cells) + " |")
  floor = results["floors"]
  cells = ["floor: trigram LM / bag of words", "-", "-"]
  for v in VIEWS:
    cells += [_iv(floor[v]["average"]) if v in floor else "", ""]
  lines.append("| " + " | ".join(cells) + " |")
  return lines


def item_table(results: dict, view: str) -> list[str]:
  """A view's per-task (or per-phenomenon) figures, one line per row."""
  items = results["phenomena"] if view == "minimal_pairs" else [
      f"{t}" for t in results["tasks"]]
  names = [i if view == "minimal_pairs" else
           f"{i} ({results['metrics'][i]})" for i in items]
  head = ["row"] + names + ["average"]
  lines = [f"**{TITLES[view]}**", "", "| " + " | ".join(head) + " |",
           "|" + "---|" * len(head)]
  rows = results["rows"] + ([{"name": "floor", "views": results["floors"]}]
                            if view in results["floors"] else [])
  for r in rows:
    summary = r["views"][view]
    lines.append("| " + " | ".join(
        [r["name"]] + [_iv(summary["items"][i]) for i in items]
        + [_iv(summary["average"])]) + " |")
  return lines


def verdicts(results: dict) -> list[str]:
  """One line per pre-trained row: the views where its paired interval
  lies above its random init, and those where it lies below (random init
  wins), so a table in which pre-training buys nothing says so."""
  lines = []
  for r in results["rows"]:
    if r["objective"] == "none":
      continue
    above = [TITLES[v] for v in VIEWS if r["views"][v]["delta"] and
             r["views"][v]["delta"][1] > 0]
    below = [TITLES[v] for v in VIEWS if r["views"][v]["delta"] and
             r["views"][v]["delta"][2] < 0]
    line = (f"- {r['name']} beats {r['baseline']} on "
            f"{', '.join(above) if above else 'no view'}")
    if below:
      line += f"; {r['baseline']} wins on {', '.join(below)}"
    lines.append(line + ".")
  return lines


def _t5_lines(results: dict) -> list[str]:
  """Our few-shot averages beside the T5 paper's GLUE, and Kendall's tau."""
  k = results.get("kendall")
  if not k:
    return []
  pub = results["published"]
  by_name = {r["name"]: r for r in results["rows"]}
  lines = ["| row | few-shot | T5 paper GLUE |", "|---|---|---|"]
  for name in k["rows"]:
    r = by_name[name]
    lines.append(f"| {name} | {_iv(r['views']['few_shot']['average'])} | "
                 f"{pub[r['t5_row']]['GLUE']:.2f} |")
  tau = k["tau"]
  return lines + ["", f"Kendall's tau between the few-shot order and the "
                  f"paper's: {tau[0]:+.2f} [{tau[1]:+.2f}, {tau[2]:+.2f}].",
                  CITATION]


def pretrain_table(results: dict) -> list[str]:
  """Each pre-trained row's final training loss and throughput (tokens
  over wall seconds, compilation and checkpoints included).

  A row's final loss is its scheme's headline (the first part of a
  several-part loss: the sentence-pair loss of NSP, SOP, StructBERT). Where that is not the masked LM's for some row that has one, an
  "MLM loss" column gives every row's masked-LM part, the loss the rows
  share.
  """
  rows = [r for r in results["rows"] if r["pretrain"]]
  if not rows:
    return []
  mlm = any("mlm_loss" in r["pretrain"] and r["pretrain"]["mlm_loss"]
            != r["pretrain"].get("loss") for r in rows)
  extra = " MLM loss |" if mlm else ""
  lines = ["**pre-training**", "",
           f"| row | model | final loss |{extra} tokens | seconds | "
           "tokens/s |", "|---|---|---|" + "---|" * (4 if mlm else 3)]
  for r in rows:
    pre = r["pretrain"]
    cells = [_loss(pre, "loss")] + ([_loss(pre, "mlm_loss")] if mlm else [])
    rate = pre["tokens"] / pre["seconds"] if pre.get("seconds") else 0
    lines.append(f"| {r['name']} | {r['model']} | {' | '.join(cells)} | "
                 f"{pre['tokens'] / 1e6:.2f}M | {pre['seconds']:.0f} | "
                 f"{rate:,.0f} |")
  note = (["", "Final loss: the scheme's headline, the first part of a "
           "several-part loss; MLM loss: the masked-LM part, where the "
           "scheme has one."] if mlm else [])
  return lines + note + [""]


def _loss(pre: dict, key: str) -> str:
  return f"{pre[key]:.3f}" if key in pre else "-"


def _diff(x, excludes_zero: bool) -> str:
  """`+4.1 [+1.2, +7.0]*` of a [mean, low, high] difference."""
  if x is None or not np.isfinite(x[0]):
    return "n/a"
  star = "*" if excludes_zero else ""
  return f"{x[0]:+.1f} [{x[1]:+.1f}, {x[2]:+.1f}]{star}"


def compression_table(results: dict) -> list[str]:
  """Size, speed and each view against the reference row (`compare_to`):
  one line per row that has a footprint."""
  reference = results.get("compare_to")
  rows = [r for r in results["rows"] if r.get("footprint")]
  if not reference or not rows:
    return []
  head = ["row", "params", "non-zero", "MB on disk", "ms at 1x128"] + [
      f"{TITLES[v]} vs {reference}" for v in VIEWS]
  latency = results.get("latency") or {}
  base = latency.get(reference)
  lines = ["**compression**", "", "| " + " | ".join(head) + " |",
           "|" + "---|" * len(head)]
  for r in rows:
    f = r["footprint"]
    ms = latency.get(r["name"])
    speed = "-" if ms is None else f"{ms:.2f}" + (
        f" ({ms / base:.2f}x)" if base and r["name"] != reference else "")
    cells = [r["name"], f"{f['params'] / 1e6:.2f}M",
             f"{f['nonzero'] / 1e6:.2f}M", f"{f['bytes'] / 1e6:.2f}", speed]
    for v in VIEWS:
      view = r["views"][v]
      cells.append(_iv(view["average"]) if r["name"] == reference else
                   _diff(view.get("vs_reference"),
                         view.get("vs_reference_excludes_zero", False)))
    lines.append("| " + " | ".join(cells) + " |")
  return lines + ["", (
      f"The {reference} row shows its scores; every other row its paired "
      f"difference from {reference} [95% interval], * where it excludes "
      "zero. Bytes: the backbone as float32 safetensors (pruned rows are "
      "stored dense), or its int8 export. Latency: median of one jitted "
      f"forward on this CPU, the rows taking turns (x: the time over "
      f"{reference}'s)."), ""]


def _read_as_lines(results: dict) -> list[str]:
  """A note for random-init rows also read another way (`cells.scorings`)."""
  out = []
  for r in results["rows"]:
    for how, view in sorted(r.get("read_as", {}).items()):
      rows = [x["name"] for x in results["rows"]
              if x["baseline"] == r["name"] and x.get("scoring") == how]
      verb = "is" if len(rows) == 1 else "are"
      out.append(f"- {r['name']} read by {how} scoring, as "
                 f"{', '.join(rows)} {verb} read: minimal pairs "
                 f"{_iv(view['average'])}, what the Δ of {', '.join(rows)} "
                 "on minimal pairs is against.")
  return out + [""] if out else []


def _skipped_lines(results: dict) -> list[str]:
  """A footnote for every view that does not apply to a row."""
  out = [f"- n/a: {r['name']}, {TITLES[v]}: {why}."
         for r in results["rows"]
         for v, why in sorted(r.get("skipped", {}).items())]
  return out + [""] if out else []


def markdown(results: dict) -> str:
  """The results as GitHub markdown, with a legend."""
  seeds = len(results["seeds"])
  pretrain = len(results.get("pretrain_seeds", []))
  over = (f"examples, the {pretrain} pre-training seeds" if pretrain > 1
          else "examples")
  lines = main_table(results) + ["", (
      f"Scores on the {results['split']} split (every example), point value "
      f"[95% bootstrap interval over {over} and the {seeds} few-shot "
      "training sets]. Δ: paired difference from the row's random-init "
      "row (its family's, or its own shape's); * marks an interval that "
      "excludes zero. Minimal pairs: percent of pairs whose grammatical "
      "sentence scores higher (50 = chance). "
      "Probe: L2 logistic regression on frozen features (scalar mix of "
      "all layers, mean-pooled). Few-shot: full fine-tuning on K examples "
      "per class, text-to-text rows ranked over the label strings."), ""]
  lines += _read_as_lines(results)
  lines += _skipped_lines(results)
  lines += verdicts(results) + [""]
  lines += compression_table(results)
  lines += pretrain_table(results)
  for view in VIEWS:
    lines += item_table(results, view) + [""]
  lines += _t5_lines(results)
  lines += ["", profile_lib.line(results["profile"], VIEWS)]
  return "\n".join(lines) + "\n"


def write_csv(path: str, results: dict) -> None:
  """One line per row: identity, budget, each view's average and delta."""
  cols = ["name", "objective", "model", "size", "tokens", "passes",
          "seconds"]
  with open(path, "w", newline="", encoding="utf-8") as f:
    out = csv.writer(f)
    out.writerow(cols + [f"{v}_{s}" for v in VIEWS for s in
                         ("mean", "low", "high", "delta", "delta_low",
                          "delta_high")])
    for r in results["rows"]:
      pre = r["pretrain"]
      line = [r["name"], r["objective"], r["model"], r["size"],
              pre.get("tokens", 0), pre.get("passes") or 0,
              pre.get("seconds", 0)]
      for v in VIEWS:
        line += r["views"][v]["average"] + (r["views"][v]["delta"]
                                            or [None] * 3)
      out.writerow(line)


def write_all(workdir: str, results: dict) -> str:
  """Writes results.{json,md,csv} into `workdir`; returns the markdown."""
  text = markdown(results)
  with open(os.path.join(workdir, "results.md"), "w", encoding="utf-8") as f:
    f.write(text)
  write_csv(os.path.join(workdir, "results.csv"), results)
  with open(os.path.join(workdir, "results.json"), "w",
            encoding="utf-8") as f:
    json.dump(results, f, indent=1, sort_keys=True)
  return text


def read(workdir: str) -> dict:
  """The results.json of a harness workdir."""
  path = os.path.join(workdir, "results.json")
  if not os.path.exists(path):
    raise FileNotFoundError(f"{workdir} has no results.json; has the harness "
                            "finished there?")
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def _markers(block: str) -> tuple[str, str]:
  """The start and end comments of a README block."""
  return f"<!-- {block}:start -->", f"<!-- {block}:end -->"


def update_readme(readme: str, workdir: str, command: str,
                  block: str = README_BLOCK) -> None:
  """Replaces the README's `block` section with `workdir`'s tables."""
  start_mark, end_mark = _markers(block)
  with open(readme, encoding="utf-8") as f:
    text = f.read()
  if start_mark not in text or end_mark not in text:
    raise ValueError(f"{readme} has no {start_mark} ... {end_mark} block")
  flag = "" if block == README_BLOCK else f" --block {block}"
  body = (f"{start_mark}\nGenerated by `python -m zoo.harness.report "
          f"{workdir} --readme {os.path.basename(readme)}{flag}` from the "
          f"results.json of `{command}`.\n\n"
          + markdown(read(workdir)) + end_mark)
  start, end = text.index(start_mark), text.index(end_mark)
  with open(readme, "w", encoding="utf-8") as f:
    f.write(text[:start] + body + text[end + len(end_mark):])


def main(argv=None) -> None:
  """`python -m zoo.harness.report DIR [--readme README.md]`."""
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("workdir")
  parser.add_argument("--readme", default=None)
  parser.add_argument("--command", default="make demo",
                      help="the command that made DIR, quoted in the README")
  parser.add_argument("--block", default=README_BLOCK,
                      help="the README block to rewrite (<!-- NAME:start -->)")
  args = parser.parse_args(argv)
  if args.readme:
    update_readme(args.readme, args.workdir, args.command, args.block)
  else:
    print(markdown(read(args.workdir)))


if __name__ == "__main__":
  main()
