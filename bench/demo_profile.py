"""Where the demo's time goes: cold, warm, and without the runtime settings.

    python bench/demo_profile.py [--config configs/compare/demo.py]
        [--out /tmp/demo_profile] [--runs off,cold,warm]

Runs `zoo.compare` on the grid in a fresh workdir per run, one run after
the other (the sample already built, as `make demo` leaves it):
- `off`: no compile cache, glibc's default allocator and XLA's einsum
  attention (`ZOO_COMPILE_CACHE=0 ZOO_HOST_MALLOC=0 ZOO_CPU_ATTENTION=0`),
  the demo without the three runtime settings the zoo makes for speed;
- `cold`: an empty compile cache (`OUT/jax_cache`);
- `warm`: a new workdir reading the programs `cold` left in that cache, as
  a second `make demo` does.

Prints one JSON line per run: its wall seconds, its results.json profile
(seconds and compiling seconds per stage, summed over the cells), and the
pre-training tokens per cell that 15 minutes would afford at that run's
speed (the time left after everything but pre-training, at the run's
pre-training tokens per second, its compiling included). Then a Markdown
table of the runs, and last the ratios of each run's wall time to
`cold`'s.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUDGET_S = 15 * 60  # `make demo`'s limit on 2 cores
STAGES = ("pretrain", "minimal_pairs", "probe", "few_shot", "floors")
ENVIRONS = {"off": {"ZOO_COMPILE_CACHE": "0", "ZOO_HOST_MALLOC": "0",
                   "ZOO_CPU_ATTENTION": "0"},
            "cold": {}, "warm": {}}


def run(name: str, config: str, out: str) -> dict:
  """One `zoo.compare` run in a new workdir; its wall time and profile."""
  workdir = os.path.join(out, name)
  shutil.rmtree(workdir, ignore_errors=True)
  cache = os.path.join(out, "jax_cache")
  if name == "cold":
    shutil.rmtree(cache, ignore_errors=True)
  env = {**os.environ, "ZOO_COMPILE_CACHE": cache, **ENVIRONS[name]}
  start = time.time()
  proc = subprocess.run(
      [sys.executable, "-m", "zoo.compare", "--config", config,
       "--workdir", workdir], cwd=REPO, env=env, capture_output=True,
      text=True, check=False)
  wall = time.time() - start
  if proc.returncode:
    raise RuntimeError(f"{name}: zoo.compare failed\n{proc.stderr[-3000:]}")
  with open(os.path.join(workdir, "results.json"), encoding="utf-8") as f:
    results = json.load(f)
  tokens = sorted({r["pretrain"]["tokens"] for r in results["rows"]
                   if r.get("pretrain")})
  profile = results["profile"]
  pretrain = profile.get("pretrain", 0.0)
  rest = wall - pretrain  # everything but pre-training's steps
  affords = (int(tokens[-1] * (BUDGET_S - rest) / pretrain)
             if tokens and pretrain else None)
  return {"run": name, "wall_s": round(wall, 1),
          "tokens_per_cell": tokens, "affords_tokens_per_cell": affords,
          **{f"{s}_s": round(profile.get(s, 0.0), 1) for s in STAGES},
          "compiling_s": round(sum(profile.get("compile", {}).values()), 1)}


def table(rows: list[dict]) -> str:
  head = ("| run | wall s | " + " | ".join(f"{s} s" for s in STAGES)
          + " | of which compiling s | tokens per cell in 15 min |")
  lines = [head, "|---|" + "---:|" * (len(STAGES) + 3)]
  for r in rows:
    cells = [r["wall_s"]] + [r[f"{s}_s"] for s in STAGES] + [r["compiling_s"]]
    affords = r["affords_tokens_per_cell"]
    end = f"{affords / 1e6:.1f}M" if affords else "-"
    lines.append(f"| {r['run']} | " + " | ".join(f"{c:.0f}" for c in cells)
                 + f" | {end} |")
  return "\n".join(lines)


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--config", default="configs/compare/demo.py")
  p.add_argument("--out", default="/tmp/demo_profile")
  p.add_argument("--runs", default="off,cold,warm")
  args = p.parse_args(argv)
  names = [n for n in args.runs.split(",") if n]
  unknown = sorted(set(names) - set(ENVIRONS))
  if unknown:
    raise SystemExit(f"unknown runs {unknown}; choose from {list(ENVIRONS)}")
  if "warm" in names and "cold" in names and (
      names.index("warm") < names.index("cold")):
    raise SystemExit("warm reads the cache cold fills: list cold first")
  os.makedirs(args.out, exist_ok=True)
  rows = []
  for name in names:
    rows.append(run(name, args.config, args.out))
    print(json.dumps(rows[-1]), flush=True)
  print(table(rows))
  cold = next((r["wall_s"] for r in rows if r["run"] == "cold"), None)
  if cold:
    print("wall time / cold: " + ", ".join(
        f"{r['run']} {r['wall_s'] / cold:.2f}" for r in rows))


if __name__ == "__main__":
  main()
