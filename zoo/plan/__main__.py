"""`python -m zoo.plan`: compile a config's training step for a TPU pod.

    python -m zoo.plan --config configs/bert_mlm.py:large --topology v5e:4x4 \\
        [--num_slices 2] [--json plan.json] [--config.batch_size=128 ...]

Prints the per-chip plan and exits 0 when it fits the chip's HBM; exits 1
with the largest buffers named when it does not, and 2 on a config the
topology cannot run (a mesh that does not cover its chips, a batch its
shards cannot split). Runs on a CPU host with libtpu installed.
"""

import os
import sys

# The plan compiles for TPU devices that libtpu describes; this host's own
# backend stays the CPU (set before jax starts).
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from absl import app, flags, logging  # pylint: disable=wrong-import-position
from ml_collections import config_flags  # pylint: disable=wrong-import-position

from zoo import plan as plan_lib  # pylint: disable=wrong-import-position

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Python config file with get_config(arg), as path[:arg].",
    lock_config=True)
_TOPOLOGY = flags.DEFINE_string(
    "topology", None, "CHIP:AxB[xC], chips v4, v5e, v5p, v6e; e.g. v5p:4x4x4.")
_SLICES = flags.DEFINE_integer(
    "num_slices", 1, "Slices joined by the data-center network; the mesh's "
    "data axis spans them.")
_JSON = flags.DEFINE_string("json", None, "Also write the plan here as JSON.")
_REMAT = flags.DEFINE_bool(
    "remat_policies", False, "Also plan the step under each remat policy "
    "(none, dots, full) and print their compile time and memory.")


def _print_remat(config, topology, slices) -> None:
  gib = 1024 ** 3
  print("\nremat policy   compile s   temp GiB   total GiB   roofline ms")
  for r in plan_lib.remat_table(config, topology, slices):
    if "compile_s" not in r:
      print(f"  {r['remat']:12s} does not fit")
      continue
    print(f"  {r['remat']:12s} {r['compile_s']:9.1f} "
          f"{r['temp_bytes'] / gib:10.3f} {r['total_bytes'] / gib:11.3f} "
          f"{r['step_s'] * 1e3:13.3g}{'' if r['fits'] else '  over HBM'}")


def main(argv) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments {argv[1:]}")
  if _CONFIG.value is None or _TOPOLOGY.value is None:
    raise app.UsageError("--config and --topology are required")
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)
  try:
    plan = plan_lib.make_plan(_CONFIG.value, _TOPOLOGY.value, _SLICES.value)
  except plan_lib.PlanDoesNotFit as e:
    print(f"zoo.plan: {e}", file=sys.stderr)
    sys.exit(1)
  except (ValueError, RuntimeError) as e:
    print(f"zoo.plan: {e}", file=sys.stderr)
    sys.exit(2)
  print(plan.report())
  if _REMAT.value:
    _print_remat(_CONFIG.value, _TOPOLOGY.value, _SLICES.value)
  if _JSON.value:
    with open(_JSON.value, "w", encoding="utf-8") as f:
      f.write(plan.to_json())
  try:
    plan.check()
  except plan_lib.PlanDoesNotFit as e:
    print(f"zoo.plan: {e}", file=sys.stderr)
    sys.exit(1)


if __name__ == "__main__":
  app.run(main)
