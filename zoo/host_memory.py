"""Host memory that stays mapped: XLA:CPU's buffers without page faults.

XLA:CPU allocates each run's temporary buffers (tens of MB for a tiny
training step) with the C allocator and frees them when the run ends. By
default glibc serves such large blocks with fresh `mmap`s (or, from a
worker thread's arena, heaps it trims), so every step faults all those
pages in again and the kernel zeroes them: on a 2-core host a tiny
training step spent nearly as much time in the kernel as in its own code
(`bench/xla_cpu_flags.py --variants "default;ZOO_HOST_MALLOC=0"` times
the step both ways).

`keep()` tells glibc to serve every block from the one main heap and never
give it back (`mallopt`: one arena, no `mmap`ed blocks, no trimming), so a
step reuses the pages the previous step touched. It must run before JAX
starts its threads (the first computation), since a thread keeps the arena
it was given: `import zoo` calls it. The process then holds its peak host
memory until it exits, which a training or evaluation process does anyway.

`ZOO_HOST_MALLOC=0` (or `off`, `false`, `no`) leaves the allocator as it
is; on a C library other than glibc `keep()` does nothing.
"""

import ctypes
import ctypes.util
import os
import sys

ENV = "ZOO_HOST_MALLOC"
_OFF = ("0", "off", "false", "no", "none")
# glibc's mallopt parameters (malloc.h).
M_TRIM_THRESHOLD, M_MMAP_MAX, M_ARENA_MAX = -1, -4, -8
SETTINGS = ((M_ARENA_MAX, 1), (M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, 2**31 - 1))

_state = {"kept": None}


def _libc():
  """glibc's handle, or None where the C library is not glibc."""
  if not sys.platform.startswith("linux"):
    return None
  try:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    libc.gnu_get_libc_version.restype = ctypes.c_char_p
    libc.gnu_get_libc_version()
    libc.mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
  except (OSError, AttributeError):
    return None
  return libc


def keep() -> bool:
  """Applies `SETTINGS` once per process; True when they are in force."""
  if _state["kept"] is not None:
    return _state["kept"]
  kept = False
  if os.environ.get(ENV, "").strip().lower() not in _OFF:
    libc = _libc()
    if libc is not None:
      kept = all(libc.mallopt(p, v) == 1 for p, v in SETTINGS)
  _state["kept"] = kept
  return kept


def kept() -> bool:
  """Whether `keep()` ran and took effect in this process."""
  return bool(_state["kept"])
