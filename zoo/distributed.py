"""One process per host: starting JAX's distributed runtime, and helpers.

On a TPU pod or GPU cluster `initialize()` with no arguments lets JAX
detect the cluster; with `coordinator_address` etc. it joins the given one.
On CPU (tests, laptops) several processes on one machine talk over gloo.
"""

import json
import os

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


def allgather_json(obj) -> list:
  """Every process's JSON-able `obj`, in process order (a collective)."""
  if jax.process_count() == 1:
    return [obj]
  data = np.frombuffer(json.dumps(obj).encode(), np.uint8)
  sizes = multihost_utils.process_allgather(np.array([data.size], np.int32))
  padded = np.zeros(int(np.max(sizes)), np.uint8)
  padded[:data.size] = data
  rows = multihost_utils.process_allgather(padded)
  sizes = np.asarray(sizes).reshape(-1)
  return [json.loads(bytes(rows[i][:sizes[i]]).decode())
          for i in range(len(sizes))]


def sync(name: str) -> None:
  """A barrier across processes (no-op with one)."""
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices(name)
