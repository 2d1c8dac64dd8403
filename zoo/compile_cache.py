"""The persistent compilation cache: compile a program once per machine.

    from zoo import compile_cache
    compile_cache.enable()          # <data dir>/jax_cache, or $ZOO_COMPILE_CACHE
    compile_cache.enable("/tmp/c")  # an explicit folder

The command-line tools (`zoo.train`, `zoo.compare`) call `enable()` before
they compile anything, so a rerun of a demo, a resumed grid or a second
run of the same config reads its compiled programs from disk instead of
compiling them again. Every program is cached, however small or quick to
compile: the harness's many tiny fine-tuning and scoring programs are most
of what it compiles. The folder is not size-capped: JAX's cap rescans the
whole folder on every write (a cold test run takes ~70% longer); the
demo leaves a few tens of MB there. Processes may share
it: an entry another process is still writing reads as a miss (JAX
compiles afresh on an unreadable entry).

The folder is `$ZOO_COMPILE_CACHE` when set (`0`, `off`, `false` or `none`
turn the cache off), else `jax_cache` under the data dir (`data.data_dir()`,
i.e. `$ZOO_DATA_DIR` or `.data`). A cache JAX was already given
(`JAX_COMPILATION_CACHE_DIR` or `jax.config`) is left as it is. JAX keys
each entry by the program, the compile options, the backend and the jax
and jaxlib versions, so a stale entry is never used for another program.
"""

import contextlib
import os
from typing import Iterator

import jax
from jax import monitoring
from jax.experimental.compilation_cache import compilation_cache as cc

ENV = "ZOO_COMPILE_CACHE"
# JAX's spans of one compilation: tracing, lowering, and the backend's
# compile (a read from the persistent cache happens inside the last).
COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration",
                  "/jax/core/compile/jaxpr_to_mlir_module_duration",
                  "/jax/core/compile/backend_compile_duration")
HIT_EVENT = "/jax/compilation_cache/cache_hits"
_watch = {"on": False, "spans": [], "hits": 0, "compiles": 0}
_OFF = ("0", "off", "false", "none", "no")


def folder() -> str | None:
  """Where the cache lives by default, or None when it is turned off."""
  value = os.environ.get(ENV, "").strip()
  if value.lower() in _OFF:
    return None
  if value:
    return value
  import data  # pylint: disable=import-outside-toplevel
  return str(data.data_dir() / "jax_cache")


def enable(path: str | None = None) -> str | None:
  """Turns the persistent cache on (at `path`, else `folder()`).

  Returns:
    The cache folder in use, or None when the cache is off.
  """
  current = jax.config.jax_compilation_cache_dir
  if current and path is None:
    return current
  path = path or folder()
  if path is None:
    return None
  os.makedirs(path, exist_ok=True)
  jax.config.update("jax_compilation_cache_dir", path)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
  return path


@contextlib.contextmanager
def suspended() -> Iterator[None]:
  """No persistent cache inside: for programs compiled for other devices
  (`zoo.plan`'s TPU executables cannot be loaded back on this host)."""
  enabled = jax.config.jax_enable_compilation_cache
  jax.config.update("jax_enable_compilation_cache", False)
  cc.reset_cache()  # JAX decides once whether to use the cache: ask again
  try:
    yield
  finally:
    jax.config.update("jax_enable_compilation_cache", enabled)
    cc.reset_cache()


def _on_span(event: str, start: float, end: float, **_) -> None:
  if event in COMPILE_EVENTS:
    _watch["spans"].append((start, end))
  if event == COMPILE_EVENTS[-1]:
    _watch["compiles"] += 1


def _on_event(event: str, **_) -> None:
  if event == HIT_EVENT:
    _watch["hits"] += 1


def watch() -> None:
  """Starts counting this process's compile time and cache hits (once)."""
  if not _watch["on"]:
    monitoring.register_event_time_span_listener(_on_span)
    monitoring.register_event_listener(_on_event)
    _watch["on"] = True


def compile_seconds() -> float:
  """Wall seconds spent compiling since `watch()`: the union of JAX's
  tracing, lowering and compile spans (a jit traced inside another's trace
  counts once), persistent-cache reads included."""
  total, reach = 0.0, float("-inf")
  for start, end in sorted(_watch["spans"]):
    if end > reach:
      total += end - max(start, reach)
      reach = end
  return total


def compiles() -> int:
  """Programs the backend compiled (or read back from the persistent
  cache) since `watch()`; a jit call that reuses a program of this process
  counts none."""
  return _watch["compiles"]


def cache_hits() -> int:
  """Programs read back from the persistent cache since `watch()`."""
  return _watch["hits"]
