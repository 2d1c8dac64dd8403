"""Shared pieces of the benchmarks: timing, matmul peak, machine facts.

Every benchmark reports medians of repeated runs after warm-up, and writes
the numbers it prints as one JSON line (`BENCH_JSON {...}`) that
`bench/report.py` turns into the README's performance section.
"""

import json
import os
import pathlib
import platform
import statistics
import sys
import time
from typing import Any, Callable

ROOT = pathlib.Path(__file__).resolve().parent.parent
# The repository first: bench/data.py must not shadow the `data` package.
if sys.path[:1] != [str(ROOT)]:
  sys.path.insert(0, str(ROOT))

import jax  # pylint: disable=g-import-not-at-top,wrong-import-position
import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

JSON_TAG = "BENCH_JSON"


def median_seconds(fn: Callable[[], Any], steps: int, warmup: int) -> float:
  """Median wall seconds of `fn()` over `steps` calls after `warmup` calls.

  `fn` must block until its work is done (e.g. `jax.block_until_ready`).
  """
  if steps < 1:
    raise ValueError(f"steps must be >= 1, got {steps}")
  for _ in range(warmup):
    fn()
  times = []
  for _ in range(steps):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def interleaved_medians(fns: dict[str, Callable[[], Any]], steps: int,
                        warmup: int, settle: int = 1) -> dict[str, float]:
  """Median wall seconds of each of `fns`, timed in alternating turns.

  Every function first runs `warmup` times; then `steps` rounds give each
  function a turn, in order: `settle` untimed calls, then one timed call.
  On a shared machine whose speed drifts (another tenant's load), taking
  turns keeps the drift out of the ratios between the functions. The
  untimed calls absorb the cost of switching: the first step after another
  function's ran measurably slower (cold caches; in one process, memory the
  allocator handed back and re-faults).
  """
  if steps < 1:
    raise ValueError(f"steps must be >= 1, got {steps}")
  for fn in fns.values():
    for _ in range(warmup):
      fn()
  times = {name: [] for name in fns}
  for _ in range(steps):
    for name, fn in fns.items():
      for _ in range(settle):
        fn()
      start = time.perf_counter()
      fn()
      times[name].append(time.perf_counter() - start)
  return {name: statistics.median(ts) for name, ts in times.items()}


def matmul_peak(dtype_name: str, n: int = 2048, steps: int = 5) -> float:
  """Measured FLOP/s of one jitted n x n x n matmul in JAX.

  Args:
    dtype_name: "float32" (full precision) or "bfloat16" (bf16 inputs,
      float32 accumulation and output, the zoo's mixed-precision matmul).
    n: the matrix size.
    steps: timed repetitions (median).

  Returns:
    FLOP/s as a float (2 n^3 per matmul).
  """
  dtype = jnp.dtype(dtype_name)
  kwargs = ({"preferred_element_type": jnp.float32} if dtype == jnp.bfloat16
            else {"precision": jax.lax.Precision.HIGHEST})
  key_a, key_b = jax.random.split(jax.random.key(0))
  a = jax.random.normal(key_a, (n, n), jnp.float32).astype(dtype)
  b = jax.random.normal(key_b, (n, n), jnp.float32).astype(dtype)
  f = jax.jit(lambda x, y: jnp.matmul(x, y, **kwargs))
  seconds = median_seconds(lambda: f(a, b).block_until_ready(), steps, 2)
  return 2.0 * n ** 3 / seconds


def machine() -> dict[str, Any]:
  """The machine and versions the numbers were measured on."""
  info = {"python": platform.python_version(), "jax": jax.__version__,
          "backend": jax.default_backend(),
          "device": str(jax.devices()[0].device_kind),
          "cores": len(os.sched_getaffinity(0)),
          "load_avg_1m": round(os.getloadavg()[0], 2)}
  try:
    import flax  # pylint: disable=g-import-not-at-top,import-outside-toplevel
    info["flax"] = flax.__version__
  except ImportError:
    pass
  info["cpu"] = _cpu_name()
  info["isa"] = _cpu_isa()
  return info


def _cpu_isa() -> list[str]:
  # The matmul extensions that decide whether bf16 pays on a CPU.
  wanted = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")
  try:
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
      if line.startswith("flags"):
        flags = set(line.split(":", 1)[1].split())
        return [f for f in wanted if f in flags]
  except OSError:
    pass
  return []


def _cpu_name() -> str:
  try:
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
      if line.startswith("model name"):
        return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or "unknown"


def emit_json(kind: str, payload: dict[str, Any]) -> None:
  """Prints one `BENCH_JSON {...}` line for `bench/report.py`."""
  print(f"{JSON_TAG} " + json.dumps({"bench": kind, **payload},
                                    sort_keys=True), flush=True)


def forward_flops(fn: Callable[..., Any], *args) -> float:
  """XLA's FLOP count of `jax.jit(fn)(*args)` (0.0 if the backend has none)."""
  compiled = jax.jit(fn).lower(*args).compile()
  cost = compiled.cost_analysis()
  if isinstance(cost, (list, tuple)):
    cost = cost[0] if cost else {}
  return float((cost or {}).get("flops", 0.0))
