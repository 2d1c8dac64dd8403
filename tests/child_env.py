"""The environment of a child Python the tests start (harness runs,
notebooks): CPU devices, one shared compile cache, the repository on the
path."""

import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child_env(cache: str | None, devices: int) -> dict:
  """os.environ for a child with `devices` CPU devices and compile cache
  `cache` (every program cached, however small; None: no cache)."""
  env = dict(os.environ, JAX_PLATFORMS="cpu",
             JAX_NUM_CPU_DEVICES=str(devices),
             PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
  if cache is not None:
    env.update(JAX_COMPILATION_CACHE_DIR=cache,
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
               JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="-1")
  return env
