"""Checkpoints of a run: Orbax, with the data iterator's state.

`<workdir>/checkpoints/<step>/` holds two items:
- `state`: the train state (step, params, optimizer state), saved sharded
  by every process and restorable onto any mesh (give the abstract target
  the new shardings);
- `meta`: JSON with the step, the seed the rngs are folded from, every
  process's data-iterator state, and the resolved config.

Saves are asynchronous; a step directory appears only once complete, so a
run killed at any moment resumes from the latest complete checkpoint.
`restore_params` reads a workdir's params back replicated over this
process's devices (what `zoo.load` and evaluation use), falling back past
an unreadable checkpoint. Nothing here unpickles.
"""

import contextlib
import gc
import json
import logging
import os
import sys
import time
import warnings
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from etils import epath


def write_config(workdir: str, config) -> str:
  """Writes the resolved config to `workdir/config.json` (process 0 only)."""
  path = os.path.join(workdir, "config.json")
  if jax.process_index() == 0:
    os.makedirs(workdir, exist_ok=True)
    text = config.to_json(indent=2) if hasattr(config, "to_json") else (
        json.dumps(config, indent=2))
    with open(path, "w", encoding="utf-8") as f:
      f.write(text + "\n")
  return path


def read_config(workdir: str) -> dict:
  """The JSON config a run wrote to its workdir."""
  path = os.path.join(workdir, "config.json")
  if not os.path.exists(path):
    raise FileNotFoundError(f"{workdir} has no config.json; is it a workdir?")
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def with_shardings(abstract, shardings):
  """`jax.ShapeDtypeStruct`s carrying the shardings to restore onto."""
  return jax.tree_util.tree_map(
      lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
      abstract, shardings)


_PLAIN_WRITES = False  # registered once per process


def _plain_array_writes_on_cpu() -> None:
  """On CPU, writes each shard from its first replica without slicing.

  Orbax's replica-parallel writes split replicated shards with one small
  jitted slice per piece; on a CPU mesh of fake devices that costs seconds
  of compilation per save and buys no bandwidth. Accelerators keep it.
  """
  global _PLAIN_WRITES
  if not _PLAIN_WRITES and jax.default_backend() == "cpu":
    _PLAIN_WRITES = True
    ocp.type_handlers.register_type_handler(
        jax.Array, ocp.type_handlers.ArrayHandler(use_replica_parallel=False),
        override=True)


class Checkpointer:
  """Saves and restores `(state, meta)` pairs under `workdir/checkpoints`.

  Every process constructs one and calls `save`/`restore` together.
  """

  def __init__(self, workdir: str, keep: int = 3, async_save: bool = True):
    _plain_array_writes_on_cpu()
    # Orbax wants absolute paths; a local workdir may be given relative.
    root = workdir if "://" in str(workdir) else os.path.abspath(workdir)
    self.directory = epath.Path(root) / "checkpoints"
    options = ocp.CheckpointManagerOptions(
        max_to_keep=keep if keep and keep > 0 else None, create=True,
        cleanup_tmp_directories=True, enable_async_checkpointing=async_save)
    self._manager = ocp.CheckpointManager(
        self.directory, options=options,
        item_handlers={"state": ocp.StandardCheckpointHandler(),
                       "meta": ocp.JsonCheckpointHandler()})

  def latest_step(self) -> int | None:
    """The latest complete checkpoint's step, or None."""
    return self._manager.latest_step()

  def all_steps(self) -> list[int]:
    """Steps of the complete checkpoints, ascending."""
    return sorted(self._manager.all_steps())

  def save(self, step: int, state, meta: dict[str, Any]) -> None:
    """Starts saving `state` (a pytree of jax Arrays) and JSON `meta`."""
    self._manager.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)),
                       force=True)

  def restore(self, step: int, target) -> tuple[Any, dict]:
    """`(state, meta)` at `step`, laid out as `target` says.

    Args:
      step: a complete checkpoint's step.
      target: the state's tree of `jax.ShapeDtypeStruct`s with shardings
        (`with_shardings`); it may be for another mesh than the save's.
    """
    if step not in self._manager.all_steps():
      raise FileNotFoundError(
          f"no complete checkpoint for step {step} in {self.directory}; "
          f"have {self.all_steps()}")
    out = self._manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(target), meta=ocp.args.JsonRestore()))
    return out["state"], out["meta"]

  def restore_meta(self, step: int) -> dict:
    """Only the JSON meta of a checkpoint."""
    out = self._manager.restore(step, args=ocp.args.Composite(
        meta=ocp.args.JsonRestore()))
    return out["meta"]

  def state_metadata(self, step: int):
    """The saved state's tree of shapes and dtypes (no arrays read)."""
    return self._manager.item_metadata(step)["state"]

  def wait(self) -> None:
    """Blocks until pending saves are complete."""
    self._manager.wait_until_finished()

  def close(self) -> None:
    """Waits for pending saves and releases the manager."""
    self._manager.wait_until_finished()
    self._manager.close()


def restore_replicated(workdir: str, step: int | None = None,
                       mesh: jax.sharding.Mesh | None = None):
  """A saved state restored whole onto every device of `mesh`.

  For reading a run (notebooks, `zoo.load`, tests), not for training.

  Args:
    workdir: the run's workdir.
    step: defaults to the latest complete checkpoint.
    mesh: defaults to a one-device mesh on this process's first device
      (each process of a multi-process run gets its own whole copy).

  Returns:
    `(state, meta)`; state leaves are jax Arrays replicated over `mesh`.
  """
  ckpt = Checkpointer(workdir, keep=0, async_save=False)
  try:
    step = ckpt.latest_step() if step is None else step
    if step is None:
      raise FileNotFoundError(f"no complete checkpoint in {workdir}")
    rep = replicated(mesh)
    target = jax.tree_util.tree_map(
        lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=rep),
        ckpt.state_metadata(step))
    return ckpt.restore(step, target)
  finally:
    ckpt.close()


def replicated(mesh: jax.sharding.Mesh | None = None
               ) -> jax.sharding.NamedSharding:
  """Whole copies on every device of `mesh` (default: a one-device mesh on
  this process's first device), how `restore_replicated` places a state.
  Arrays placed alike share their compiled programs: jit keys a program by
  its inputs' shardings, so a random init left uncommitted would compile
  every program a restored checkpoint of the same model already has."""
  if mesh is None:
    mesh = jax.sharding.Mesh(jax.local_devices()[:1], ("data",))
  return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())


def local_mesh() -> jax.sharding.Mesh:
  """A mesh over this process's devices; params get replicated over it."""
  return jax.sharding.Mesh(np.array(jax.local_devices()), ("data",))


def restore_params(workdir: str, step: int | None = None):
  """`(params, step)` of a workdir's checkpoint, replicated locally.

  With `step` None, tries the complete checkpoints newest first: one that
  fails to restore (a corrupt or missing file) is reported with a warning
  and the previous one is tried.

  Raises:
    FileNotFoundError: no complete checkpoint (or not `step`).
    ValueError: every complete checkpoint failed; the errors are listed.
  """
  ckpt = Checkpointer(workdir, keep=0, async_save=False)
  try:
    steps = ckpt.all_steps()
  finally:
    ckpt.close()
  if step is not None:
    if step not in steps:
      raise FileNotFoundError(f"{workdir} has no complete checkpoint for "
                              f"step {step}; complete: {steps}")
    steps = [step]
  if not steps:
    raise FileNotFoundError(
        f"{workdir} has no complete checkpoint under checkpoints/ (a run "
        "killed before its first save leaves none); train longer or point "
        "at another workdir")
  errors = []
  with _abandoned_reads_quieted() as failed:
    for s in sorted(steps, reverse=True):
      try:
        state, _ = restore_replicated(workdir, s, local_mesh())
        return state["params"], s
      except Exception as e:  # pylint: disable=broad-except
        errors.append(f"step {s}: {type(e).__name__}: {str(e)[:300]}")
      failed(os.path.join(os.path.abspath(workdir), "checkpoints", str(s)))
      warnings.warn(f"checkpoint {s} of {workdir} is unreadable "
                    f"({errors[-1]}); trying the previous complete checkpoint")
  raise ValueError(f"no checkpoint of {workdir} could be restored:\n"
                   + "\n".join(errors))


def _abandoned_read(unraisable) -> bool:
  """Whether an unraisable error is a failed restore's abandoned read: a
  TensorStore callback into Orbax's closed event loop, or a pending read
  coroutine that raised when the collector closed it."""
  e = unraisable.exc_value
  while e is not None:
    if isinstance(e, GeneratorExit) or (
        isinstance(e, RuntimeError) and "Event loop is closed" in str(e)):
      return True
    e = e.__context__
  return False


class _ReportedReads(logging.Filter):
  """Drops asyncio's "exception was never retrieved" records whose error
  names a checkpoint directory that a warning already reported."""

  def __init__(self):
    super().__init__()
    self.dirs: list[str] = []

  def filter(self, record: logging.LogRecord) -> bool:
    error = record.exc_info[1] if record.exc_info else None
    return not (error is not None and "never retrieved" in record.getMessage()
                and any(d in str(error) for d in self.dirs))


_QUIET: dict[str, Any] = {"dropped": 0}


def _drop_abandoned(wrapped):
  """An unraisable hook dropping `_abandoned_read` errors (counted in
  `_QUIET`), passing every other one to `wrapped`."""
  def drop(unraisable):
    if _abandoned_read(unraisable):
      _QUIET["dropped"] += 1
    else:
      wrapped(unraisable)
  drop.drops_abandoned_reads = True
  return drop


@contextlib.contextmanager
def _abandoned_reads_quieted(settle_s: float = 0.5, limit_s: float = 10.0):
  """Yields `failed(step_dir)`, to call after a failed restore.

  One unreadable shard fails Orbax's gathered reads and closes their event
  loop while the other reads are still pending. Each would print a
  traceback whenever its TensorStore read completes or the collector
  frees it, and asyncio logs each failed read's future as "never
  retrieved", long after the warning that named the checkpoint. Inside
  this context the unraisable hook drops those errors (`_abandoned_read`;
  every other one reaches the hook it wraps). After a failed restore the
  hook stays, since a read abandoned then may be freed at any later
  collection, and the `asyncio` logger drops records of reads from the
  reported directory; `failed` then collects until `settle_s` passes
  without such an error (at most `limit_s`).
  """
  previous = sys.unraisablehook
  if not getattr(previous, "drops_abandoned_reads", False):  # not twice
    sys.unraisablehook = _drop_abandoned(previous)
  failures = []

  def failed(step_dir: str) -> None:
    failures.append(step_dir)
    if "log" not in _QUIET:
      _QUIET["log"] = _ReportedReads()
      logging.getLogger("asyncio").addFilter(_QUIET["log"])
    _QUIET["log"].dirs.append(step_dir)
    seen, deadline = -1, time.monotonic() + limit_s
    while _QUIET["dropped"] != seen and time.monotonic() < deadline:
      seen = _QUIET["dropped"]
      gc.collect()
      time.sleep(settle_s)

  try:
    yield failed
  finally:
    if not failures:
      sys.unraisablehook = previous
