"""Each timed run in its own process, stepping when the parent says.

`train_step.py` times the zoo and the reference in turns. In one process
they share an allocator and a cache, and the step after the other
framework's ran measurably slower; one worker process per run keeps each
framework's memory its own, while the parent still alternates their steps
so a drift in the host's speed falls on both sides of a ratio.

A worker builds its run, warms it up, sends `("ready", info)`, then answers
each "step" with the step's wall seconds until it reads "stop". Messages
are plain tuples of str, int and float.
"""

import multiprocessing as mp
import os
import time
from typing import Any, Callable


def _build(kind: str, spec: dict[str, Any]):
  """The step function of a run and its facts (zoo: flops)."""
  import _zoo  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  if kind == "zoo":
    fn, flops, _ = _zoo.prepare_step(
        spec["name"], spec["dtype"], spec["batch"], spec["seq_len"],
        size=spec["size"], model_args=spec["model_args"],
        vocab_size=spec.get("vocab_size"))
    return fn, {"flops": flops}
  import _hf  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  shapes = _zoo.reference_shapes(spec["name"], spec["batch"],
                                 spec["seq_len"], spec["size"],
                                 spec["model_args"])
  return _hf.prepare_step(spec["dtype"], shapes), {}


def _serve(kind: str, spec: dict[str, Any], warmup: int, conn) -> None:
  if spec.get("xla_flags"):  # before this fresh process starts jax
    os.environ["XLA_FLAGS"] = " ".join(
        [os.environ.get("XLA_FLAGS", ""), spec["xla_flags"]]).strip()
  try:
    fn, info = _build(kind, spec)
    for _ in range(warmup):
      fn()
    conn.send(("ready", info))
    while conn.recv() == "step":
      start = time.perf_counter()
      fn()
      conn.send(("done", time.perf_counter() - start))
  except Exception as e:  # pylint: disable=broad-except
    conn.send(("error", f"{type(e).__name__}: {e}"))
    raise


class Worker:
  """One run in a child process; `step()` runs one step there, blocking."""

  def __init__(self, kind: str, spec: dict[str, Any], warmup: int,
               label: str | None = None):
    ctx = mp.get_context("spawn")
    self.label = label or f"{kind}_{spec['dtype']}"
    self._conn, child = ctx.Pipe()
    self._proc = ctx.Process(target=_serve, args=(kind, spec, warmup, child),
                             daemon=True)
    # The child inherits the environment when it starts, before it imports
    # the script that imports jax and the zoo.
    saved = dict(os.environ)
    os.environ.update(spec.get("env") or {})
    try:
      self._proc.start()
    finally:
      os.environ.clear()
      os.environ.update(saved)
    self.info = self._expect("ready")

  def _expect(self, tag: str):
    if not self._conn.poll(3600):
      raise TimeoutError(f"{self.label}: no answer in an hour")
    got, payload = self._conn.recv()
    if got == "error":
      raise RuntimeError(f"{self.label} worker failed: {payload}")
    if got != tag:
      raise RuntimeError(f"{self.label}: expected {tag!r}, got {got!r}")
    return payload

  def step(self) -> float:
    self._conn.send("step")
    return self._expect("done")

  def close(self) -> None:
    try:
      self._conn.send("stop")
    except (BrokenPipeError, OSError):
      pass
    self._proc.join(timeout=30)
    if self._proc.is_alive():
      self._proc.kill()


def steppers(workers: list[Worker]) -> dict[str, Callable[[], float]]:
  """`{label: step}` for `_common.interleaved_medians`."""
  return {w.label: w.step for w in workers}
