"""Measured pod plans for the README: `python -m zoo.plan` on real sizes.

    python bench/plans.py [--only NAME ...] [--out DIR] [--readme README.md]
    python bench/plans.py --all_sizes   # every family at every size

Runs each entry of `PLANS` as its own `python -m zoo.plan ... --json`
command (the command line the README shows), keeps each plan's JSON in
`--out`, and rewrites the README's `<!-- plans:start -->` block with one
row per plan. Entries already in `--out` are not compiled again (delete
the file to redo one). Needs libtpu (`pip install -e '.[tpu]'`); each
plan compiles for minutes on 2 cores.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys

import report  # pylint: disable=g-bad-import-order
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from zoo.plan.report import Plan  # pylint: disable=wrong-import-position

ROOT = pathlib.Path(__file__).resolve().parent.parent
BERT = ["--config.data.vocab_size=30522"]
T5 = ["--config.data.vocab_size=32128"]
UNROLLED = ",model_args.scan_layers=false"  # exact HBM traffic, slower compile
NO_ATTN_DROPOUT = ",model_args.attention_dropout_rate=0"  # the splash kernel
# BERT's recipe (attention dropout 0.1) keeps the dense einsum path.
ATTN_DROPOUT = ",model_args.attention_dropout_rate=0.1"
# T5 v1.1 XXL's shape (11B parameters) on T5-large's config, its blocks
# recomputed in the backward pass, without dropout (as T5 v1.1 pre-trained).
XXL = ("configs/t5_span.py:size=large,model_args.embed_dim=4096,"
       "model_args.mlp_dim=10240,model_args.num_heads=64,model_args.remat=full,"
       "model_args.dropout_rate=0")


def _rows(batch: int, fsdp: int) -> list[str]:
  return [f"--config.batch_size={batch}", "--config.seq_len=512",
          f"--config.mesh.fsdp={fsdp}"]


# name -> (config, topology, slices, overrides)
PLANS = {
    "bert_large_v5e16": ("configs/bert_mlm.py:large" + UNROLLED + ATTN_DROPOUT,
                         "v5e:4x4", 1, BERT + _rows(256, 4)),
    "bert_large_splash_v5e16": (
        "configs/bert_mlm.py:large" + UNROLLED + NO_ATTN_DROPOUT, "v5e:4x4",
        1, BERT + _rows(256, 4)),
    "bert_large_splash_v5p64": (
        "configs/bert_mlm.py:large" + UNROLLED + NO_ATTN_DROPOUT,
        "v5p:4x4x4", 1, BERT + _rows(1024, 8)),
    "t5_base_v5e16": ("configs/t5_span.py:base" + UNROLLED, "v5e:4x4", 1,
                      T5 + _rows(128, 4)),
    "t5_base_v5p64": ("configs/t5_span.py:base" + UNROLLED, "v5p:4x4x4", 1,
                      T5 + _rows(512, 8)),
    "t5_large_v5e16": ("configs/t5_span.py:large" + UNROLLED, "v5e:4x4", 1,
                       T5 + _rows(128, 16)),
    "t5_large_scan_v5e16": ("configs/t5_span.py:large", "v5e:4x4", 1,
                            T5 + _rows(128, 16)),
    # Remat runs scanned: its unrolled 48-layer compile needs more than
    # the 24 GiB of host memory here.
    "t5_large_remat_v5e16": (
        "configs/t5_span.py:large,model_args.remat=full",
        "v5e:4x4", 1, T5 + _rows(128, 16)),
    "t5_large_v5p64": ("configs/t5_span.py:large" + UNROLLED, "v5p:4x4x4",
                       1, T5 + _rows(512, 8)),
    "t5_xxl_v5p128": (XXL, "v5p:4x4x8", 1, T5 + _rows(256, -1) + [
        "--config.mesh.data=1"]),
    "bert_base_2_slices_v5e16": ("configs/bert_mlm.py:base" + UNROLLED,
                                 "v5e:4x4", 2, BERT + _rows(512, 4)),
}


def every_size(topology: str = "v5p:2x2x2") -> dict:
  """A plan of each family's own scheme at each of its sizes, 64 rows of
  128 on `topology`, data-parallel (the `--all_sizes` table)."""
  sys.path.insert(0, str(ROOT))
  from configs.compare import family  # pylint: disable=import-outside-toplevel
  from zoo import models  # pylint: disable=import-outside-toplevel
  plans = {}
  for fam in models.families():
    for size in models.get(fam).SIZES:
      plans[f"{fam}_{size}"] = (
          f"configs/bert_mlm.py:size={size}", topology, 1,
          [f"--config.model={fam}",
           f"--config.objective={family.FAMILY_SCHEME[fam]}",
           "--config.batch_size=64", "--config.seq_len=128"])
  return plans


def command(name: str, out: pathlib.Path) -> list[str]:
  config, topology, slices, overrides = TABLE[name]
  cmd = ["python", "-m", "zoo.plan", "--config", config, "--topology",
         topology] + (["--num_slices", str(slices)] if slices > 1 else [])
  return cmd + overrides + ["--json", str(out / f"{name}.json")]


def run(name: str, out: pathlib.Path) -> dict:
  """The plan's JSON (compiled now unless `out` holds it) and its command."""
  path = out / f"{name}.json"
  cmd = command(name, out)
  if not path.exists():
    print(f"planning {name}: {' '.join(cmd)}", flush=True)
    done = subprocess.run([sys.executable] + cmd[1:], cwd=ROOT, check=False,
                          capture_output=True, text=True)
    if done.returncode == 1 and not path.exists():  # the compiler refused
      refusal = done.stderr.strip().splitlines()[-1]
      path.write_text(json.dumps({"refused": refusal}))
    elif done.returncode not in (0, 1):  # 1: compiled, over the HBM
      raise RuntimeError(f"{name} failed:\n{done.stderr[-3000:]}")
    print(done.stdout, flush=True)
  plan = json.loads(path.read_text())
  shown = cmd[:-2]  # the --json flag is this script's
  return dict(plan, name=name, command=" ".join(shown), topology=cmd[6])


def row(p: dict) -> str:
  gib = 1024 ** 3
  if "refused" in p:
    need = p["refused"].split("required for HLO temporaries (")[-1]
    return (f"| {p['name']} | {p['topology']} | does not fit: temporaries "
            f"({need.split(')')[0]} > the chip's HBM) |" + " |" * 9)
  r = Plan.from_dict(p).roofline()
  mesh = "x".join(str(v) for v in p["mesh"].values())
  comm = sum(c["bytes"] for c in p["collectives"].values()) / 1e9
  dcn = sum(c["dcn_bytes"] for c in p["collectives"].values()) / 1e9
  comm = f"{comm:.2f}" + (f" (DCN {dcn:.2f})" if dcn else "")
  slices = f" x{p['num_slices']}" if p["num_slices"] > 1 else ""
  loops = " (scan)" if p.get("loops") else ""
  return (f"| {p['name']}{loops} | {p['topology']}{slices} | {mesh} | "
          f"{p['batch_size']}x{p['seq_len']} | "
          f"{(p['param_bytes'] + p['opt_bytes']) / gib:.2f} | "
          f"{p['temp_bytes'] / gib:.2f} | {p['total_bytes'] / gib:.2f} / "
          f"{p['hbm_bytes'] / gib:.0f} | {p['flops'] / 1e12:.1f} | "
          f"{comm} | {r['step_s'] * 1e3:.0f} ({r['bound']}) | "
          f"{r['mfu']:.2f} | {p['compile_s']:.0f} |")


UNROLLED_NOTE = (
    "The plans unroll their layers (`scan_layers=false`) where this host "
    "can compile them so: the compiler counts a loop body's HBM traffic "
    "once, so the HBM time of a plan marked (scan) is a lower bound.")
LOOPS_NOTE = (
    "Stacks of 12 or more layers scan (the default). (scan) marks a "
    "program with loops (scanned layers, ELMo's recurrence): the compiler "
    "counts a loop body's HBM traffic once, so its HBM time is a lower "
    "bound.")


def section(plans: list[dict], loops: str = UNROLLED_NOTE) -> str:
  lines = [
      "Generated by `python bench/plans.py` from the `--json` of each "
      "command below (run on a 2-core CPU host with libtpu; no TPU). Per "
      "chip: state = params + AdamW moments, GiB; total = the compiler's "
      "peak HBM of the step; TFLOP and collective GB (sent per chip) per "
      "step; the roofline step is the largest of compute at the bf16 peak, "
      "HBM traffic, ICI and DCN time (perfect overlap), and MFU the compute "
      "share of it. " + loops, "",
      "| plan | topology | mesh (data x fsdp x tensor) | batch | state GiB "
      "| temp GiB | total / HBM GiB | TFLOP | coll. GB | roofline ms | "
      "MFU | compile s |",
      "|---|---|---|---|---|---|---|---|---|---|---|---|"]
  lines += [row(p) for p in plans]
  lines += ["", "Commands:", ""]
  lines += [f"- `{p['name']}`: `{p['command']}`" for p in plans]
  return "\n".join(lines) + "\n"


TABLE = dict(PLANS)


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--only", nargs="*", default=None)
  parser.add_argument("--all_sizes", action="store_true",
                      help="plan every (family, size) instead (block "
                      "plan_sizes)")
  parser.add_argument("--out", default=str(ROOT / "workdirs" / "plans"))
  parser.add_argument("--readme", default=str(ROOT / "README.md"))
  args = parser.parse_args(argv)
  if args.all_sizes:
    TABLE.clear()
    TABLE.update(every_size())
  out = pathlib.Path(args.out)
  os.makedirs(out, exist_ok=True)
  plans = [run(name, out) for name in (args.only or list(TABLE))]
  block = "plan_sizes" if args.all_sizes else "plans"
  readme = pathlib.Path(args.readme)
  note = LOOPS_NOTE if args.all_sizes else UNROLLED_NOTE
  readme.write_text(report.replace_section(readme.read_text(),
                                           section(plans, note), block))
  print(f"wrote the {block} block of {readme}")


if __name__ == "__main__":
  main()
