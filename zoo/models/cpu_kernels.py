"""The zoo's CPU kernels: one library built for the host, called through
XLA's FFI.

- `cpu_attention.cc`: dense attention, forward and backward
  (`zoo.models.cpu_attention`).
- `cpu_transpose.cc`: a tiled transposed copy (`transpose`), which
  `zoo.models.dense` uses for a weight gradient's x^T.

The library is compiled with the host's C++ compiler (`g++`, or `$CXX`) on
first use (`library`), or ahead by `python -m zoo.models.cpu_kernels`, into
`<data dir>/kernels` (or `$ZOO_KERNEL_DIR`), once per source, jaxlib
version and machine. Without a compiler, callers warn once (`available`)
and keep XLA's own programs.
"""

import contextlib
import ctypes
import hashlib
import os
import platform
import subprocess
import tempfile
import warnings
from pathlib import Path

import jax
import jaxlib
import numpy as np

Array = jax.Array

_HERE = Path(__file__).parent
SOURCES = (_HERE / "cpu_attention.cc", _HERE / "cpu_transpose.cc")
HEADERS = (_HERE / "cpu_attention_simd.h", _HERE / "cpu_parallel.h")
TARGETS = {"zoo_attention_forward": "ZooAttentionForward",
           "zoo_attention_backward": "ZooAttentionBackward",
           "zoo_transpose": "ZooTranspose"}
TRANSPOSE_ENV = "ZOO_CPU_TRANSPOSE"
_FLAGS = ("-O3", "-march=native", "-std=c++17", "-fPIC", "-shared",
          "-fno-math-errno")
_state: dict = {}


def kernel_dir() -> Path:
  """Where built kernels live: `$ZOO_KERNEL_DIR`, else `<data dir>/kernels`."""
  if os.environ.get("ZOO_KERNEL_DIR"):
    return Path(os.environ["ZOO_KERNEL_DIR"])
  import data  # pylint: disable=import-outside-toplevel
  return data.data_dir() / "kernels"


def _build(target: Path) -> None:
  compiler = os.environ.get("CXX", "g++")
  include = jax.ffi.include_dir()
  target.parent.mkdir(parents=True, exist_ok=True)
  with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
    out = Path(tmp) / target.name
    cmd = [compiler, *_FLAGS, "-I", include, *map(str, SOURCES), "-o",
           str(out)]
    try:
      run = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except FileNotFoundError as e:
      raise RuntimeError(f"no C++ compiler {compiler!r} to build the CPU "
                         "kernels (set CXX)") from e
    if run.returncode:
      raise RuntimeError(f"building the CPU kernels failed "
                         f"({' '.join(cmd)}):\n{run.stderr[-2000:]}")
    os.replace(out, target)  # atomic: processes may build side by side


def library() -> Path:
  """The built kernel library (compiled on first use), registered with XLA.

  Raises:
    RuntimeError: when the compiler is missing or the build fails.
  """
  if "path" in _state:
    return _state["path"]
  if "error" in _state:
    raise RuntimeError(_state["error"])
  text = b"".join(p.read_bytes() for p in (*SOURCES, *HEADERS))
  key = hashlib.sha256(text + " ".join(
      (*_FLAGS, jaxlib.__version__, platform.machine())).encode())
  target = kernel_dir() / f"cpu_kernels-{key.hexdigest()[:16]}.so"
  try:
    if not target.exists():
      _build(target)
    lib = ctypes.cdll.LoadLibrary(str(target))
  except (OSError, RuntimeError) as e:
    _state["error"] = str(e)
    raise RuntimeError(str(e)) from e
  for name, symbol in TARGETS.items():
    jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(getattr(lib, symbol)),
                                platform="cpu")
  _state["path"] = target
  return target


def available() -> bool:
  """Whether the kernels build and load here (warns once when not)."""
  try:
    library()
    return True
  except RuntimeError as e:
    if not _state.get("warned"):
      _state["warned"] = True
      warnings.warn(f"CPU kernels unavailable, using XLA's: {e}")
    return False


def switched_off(env: str) -> bool:
  """Whether `$env` (e.g. `ZOO_CPU_ATTENTION`) says 0/off/false/no."""
  return os.environ.get(env, "1").strip().lower() in ("0", "off", "false",
                                                      "no")


@contextlib.contextmanager
def off():
  """No kernel in programs traced inside (their callers keep XLA's own
  programs): e.g. to count FLOPs, which XLA's cost analysis cannot see in a
  custom call."""
  _state["off"] = _state.get("off", 0) + 1
  try:
    yield
  finally:
    _state["off"] -= 1


def is_off() -> bool:
  """Whether a program traced now is inside `off()`."""
  return bool(_state.get("off"))


def transpose_applies() -> bool:
  """Whether `dense` takes `transpose` for a weight gradient: where the
  program is on one device, or under an active mesh (`sharding.activate`),
  which splits it per device (the custom call is not partitioned); never
  with `ZOO_CPU_TRANSPOSE=0` or inside `off()`, and where the library
  builds."""
  if switched_off(TRANSPOSE_ENV) or is_off():
    return False
  placed = jax.device_count() == 1 or not jax.sharding.get_abstract_mesh(
  ).empty
  return placed and available()


def transpose(x: Array, lead: int) -> Array:
  """x [*L, *R] -> [*R, *L], L its `lead` leading axes (a CPU custom call).

  The numbers are `jnp.transpose`'s exactly; any dtype of 1, 2, 4 or 8
  bytes.
  """
  library()
  perm = (*range(lead, x.ndim), *range(lead))
  shape = tuple(x.shape[i] for i in perm)
  return jax.ffi.ffi_call("zoo_transpose", jax.ShapeDtypeStruct(
      shape, x.dtype), vmap_method="sequential")(x, lead=np.int64(lead))


if __name__ == "__main__":
  print(library())
