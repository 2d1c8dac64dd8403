"""One process per host: starting JAX's distributed runtime, and helpers.

On a TPU pod or GPU cluster `initialize()` with no arguments lets JAX
detect the cluster; with `coordinator_address` etc. it joins the given one.
On CPU (tests, laptops) several processes on one machine talk over gloo.
"""

import base64
import json
import os
from typing import Any, Callable, Sequence

import jax
import numpy as np
from absl import logging
from jax.experimental import multihost_utils


def _cpu_only() -> bool:
  platforms = os.environ.get("JAX_PLATFORMS", "") or (
      jax.config.jax_platforms or "")
  return platforms.strip().lower() == "cpu"


def initialize(coordinator_address: str | None = None,
               num_processes: int | None = None,
               process_id: int | None = None) -> None:
  """Starts the multi-process runtime, before any other JAX call.

  Args:
    coordinator_address: "HOST:PORT" of process 0; None to auto-detect.
    num_processes: how many processes take part.
    process_id: this process's index in [0, num_processes).

  Raises:
    ValueError: some but not all of the three are given, or the id is out
      of range.
  """
  given = [coordinator_address, num_processes, process_id]
  if any(v is not None for v in given):
    if any(v is None for v in given):
      raise ValueError(
          "--coordinator_address, --num_processes and --process_id go "
          f"together; got {coordinator_address!r}, {num_processes!r}, "
          f"{process_id!r}")
    if not 0 <= process_id < num_processes:
      raise ValueError(
          f"--process_id {process_id} is not in [0, {num_processes})")
    if _cpu_only():
      # CPU collectives across processes need gloo; the default is none.
      jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address, num_processes, process_id)
    return
  if _cpu_only():
    return
  try:
    jax.distributed.initialize()
  except (ValueError, RuntimeError) as err:
    # No cluster environment detected: an ordinary single-process run.
    logging.info("single process run (%s)", err)


def is_main() -> bool:
  """Whether this process writes logs and other per-run files."""
  return jax.process_index() == 0


def _encode(obj):
  """JSON-able form of `obj`, numpy arrays as tagged base64 (exact bits)."""
  if isinstance(obj, np.ndarray):
    return {"__ndarray__": base64.b64encode(
        np.ascontiguousarray(obj).tobytes()).decode(),
            "dtype": obj.dtype.str, "shape": list(obj.shape)}
  if isinstance(obj, dict):
    return {k: _encode(v) for k, v in obj.items()}
  if isinstance(obj, (list, tuple)):
    return [_encode(v) for v in obj]
  return obj


def _decode(obj):
  """Inverse of `_encode`."""
  if isinstance(obj, dict):
    if "__ndarray__" in obj:
      raw = base64.b64decode(obj["__ndarray__"])
      return np.frombuffer(raw, np.dtype(obj["dtype"])).reshape(obj["shape"])
    return {k: _decode(v) for k, v in obj.items()}
  if isinstance(obj, list):
    return [_decode(v) for v in obj]
  return obj


def allgather_json(obj) -> list:
  """Every process's `obj`, in process order (a collective).

  `obj` is JSON-able, and may hold numpy arrays (sent bit for bit); tuples
  come back as lists.
  """
  if jax.process_count() == 1:
    return [obj]
  data = np.frombuffer(json.dumps(_encode(obj)).encode(), np.uint8)
  sizes = multihost_utils.process_allgather(np.array([data.size], np.int32))
  padded = np.zeros(int(np.max(sizes)), np.uint8)
  padded[:data.size] = data
  rows = multihost_utils.process_allgather(padded)
  sizes = np.asarray(sizes).reshape(-1)
  return [_decode(json.loads(bytes(rows[i][:sizes[i]]).decode()))
          for i in range(len(sizes))]


def split_work(fn: Callable[[Any], Any], items: Sequence) -> list:
  """`[fn(x) for x in items]`, the items dealt out across processes.

  Item i runs on process i mod P, on that process's own devices (no
  collective inside `fn`); every process gets every result, in item order.
  Results are what `allgather_json` carries. Every process calls this with
  the same items. With one process it is the plain loop.
  """
  count, index = jax.process_count(), jax.process_index()
  if count == 1:
    return [fn(x) for x in items]
  mine = [fn(x) for x in list(items)[index::count]]
  out = [None] * len(items)
  for process, results in enumerate(allgather_json(mine)):
    out[process::count] = results
  return out


def main_first(fn: Callable[[], Any], name: str):
  """`fn()` on process 0, then, after a barrier, on the others: for work
  that fills a shared cache (a data build, a tokenizer) exactly once."""
  if jax.process_count() == 1:
    return fn()
  out = fn() if is_main() else None
  sync(f"zoo_main_first_{name}")
  return out if is_main() else fn()


def sync(name: str) -> None:
  """A barrier across processes (no-op with one)."""
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices(name)
