"""The harness's views of the demo's random-init rows under compile options.

    python bench/harness_compile.py [--config configs/compare/demo.py]
        [--rounds 2] [--views minimal_pairs,probe,few_shot]
        [--variants "default;--xla_cpu_use_fusion_emitters=false"]

Each (variant, round) is a fresh process with the persistent compile cache
off, so every program compiles cold. It reads the grid's random-init rows
(one per family) with the grid's views, as `zoo.compare` would, and
reports each view's wall seconds and the seconds JAX spent compiling
(`zoo.compile_cache.compile_seconds`). Variants take turns, so the host's
drift falls on all alike. A variant is `XLA_FLAGS` words (`--name=value`)
and environment words (`NAME=value`, e.g. `ZOO_HOST_MALLOC=0`); "default"
is none. The last lines, a Markdown table, give each variant's median
compile and run (wall minus compile) seconds per view, and their ratios to
the first variant.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def worker(config: str, views: list[str]) -> dict:
  """{view: [wall seconds, compile seconds]} summed over the random rows."""
  sys.path.insert(0, REPO)
  import importlib  # pylint: disable=import-outside-toplevel
  from zoo import compile_cache  # pylint: disable=import-outside-toplevel
  from zoo.harness import cells as cells_lib  # pylint: disable=import-outside-toplevel
  from zoo.harness import run as run_lib  # pylint: disable=import-outside-toplevel
  path, _, arg = config.partition(":")
  module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
  grid = module.get_config(arg or None)
  compile_cache.watch()
  inputs = run_lib._Inputs(grid)  # pylint: disable=protected-access
  out = {v: [0.0, 0.0] for v in views}
  for cell in cells_lib.parse_cells(grid):
    if cell.pretrained or cell.source:
      continue
    backbone = run_lib._Backbone(grid, cell, "", inputs)  # pylint: disable=protected-access
    backbone.get()
    for view in views:
      start, compiling = time.time(), compile_cache.compile_seconds()
      run_lib._compute(grid, inputs, view, cell, backbone)  # pylint: disable=protected-access
      out[view][0] += time.time() - start
      out[view][1] += compile_cache.compile_seconds() - compiling
  return out


def _environ(variant: str) -> dict:
  env = dict(os.environ, ZOO_COMPILE_CACHE="0")
  flags = [w for w in variant.split() if w.startswith("--")]
  env.update(w.split("=", 1) for w in variant.split()
             if not w.startswith("--") and "=" in w)
  if flags:
    env["XLA_FLAGS"] = " ".join([env.get("XLA_FLAGS", "")] + flags).strip()
  return env


def run_variant(variant: str, args) -> dict:
  """One cold worker process under `variant`."""
  cmd = [sys.executable, __file__, "--worker", "--config", args.config,
         "--views", ",".join(args.views)]
  env = _environ("" if variant == "default" else variant)
  out = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True,
                       text=True, check=False)
  if out.returncode:
    raise RuntimeError(f"{variant}: worker failed\n{out.stderr[-3000:]}")
  return json.loads(out.stdout.strip().splitlines()[-1])


def summarise(variants: list[str], runs: dict, views: list[str]) -> list:
  """Rows (variant, view, compile s, run s, compile ratio, run ratio)."""
  rows, first = [], variants[0]
  med = lambda v, view, i: statistics.median(
      r[view][i] if i == 1 else r[view][0] - r[view][1] for r in runs[v])
  for v in variants:
    for view in views + ["all"]:
      names = views if view == "all" else [view]
      comp = sum(med(v, n, 1) for n in names)
      run = sum(med(v, n, 0) for n in names)
      comp0 = sum(med(first, n, 1) for n in names)
      run0 = sum(med(first, n, 0) for n in names)
      rows.append((v, view, comp, run, comp / comp0, run / run0))
  return rows


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--config", default="configs/compare/demo.py")
  p.add_argument("--rounds", type=int, default=2)
  p.add_argument("--views", default="minimal_pairs,probe,few_shot")
  p.add_argument("--variants",
                 default="default;--xla_cpu_use_fusion_emitters=false")
  p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  args.views = [v for v in args.views.split(",") if v]
  if args.worker:
    print(json.dumps(worker(args.config, args.views)))
    return
  variants = [v.strip() for v in args.variants.split(";") if v.strip()]
  runs = {v: [] for v in variants}
  for r in range(args.rounds):
    for v in variants:
      runs[v].append(run_variant(v, args))
      print(json.dumps({"round": r, "variant": v, "views": runs[v][-1]}),
            flush=True)
  print("| variant | view | compile s | run s | compile / first | "
        "run / first |\n|---|---|---:|---:|---:|---:|")
  for v, view, comp, run, rc, rr in summarise(variants, runs, args.views):
    print(f"| {v} | {view} | {comp:.1f} | {run:.1f} | {rc:.3f} | {rr:.3f} |")


if __name__ == "__main__":
  main()
