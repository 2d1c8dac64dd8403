"""Every notebook executes, against a tiny harness workdir made here."""

import glob
import os
import subprocess
import sys

import nbclient
import nbformat
import pytest

from tests.child_env import REPO, child_env

pytestmark = pytest.mark.slow  # minutes of training runs: not the quick lane

NOTEBOOKS = sorted(glob.glob(os.path.join(REPO, "notebooks", "*.ipynb")))


def _env(cache: str) -> dict:
  """One CPU device and one compile cache for the harness and the kernels,
  so the kernels reuse what the harness compiled."""
  return child_env(cache, 1)


def _run(tool: str, config: str, workdir: str, env: dict) -> None:
  """`python -m <tool> --config <config> --workdir <workdir>`, which must
  succeed."""
  proc = subprocess.run(
      [sys.executable, "-m", tool, "--config", os.path.join(REPO, config),
       "--workdir", workdir],
      cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
  assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
  """A finished smoke grid of the MLM row (and its random init), and a
  tiny word2vec run: their workdirs, a checkpoint and the env to use."""
  root = tmp_path_factory.mktemp("nb")
  workdir, env = str(root / "harness"), _env(str(root / "jax_cache"))
  _run("zoo.compare", "configs/compare/smoke.py:only=mlm", workdir, env)
  static = str(root / "static")  # the embeddings notebook's static foil
  _run("zoo.train", "configs/word2vec_skipgram.py:tiny", static, env)
  env.update(ZOO_HARNESS=workdir, ZOO_TASK="trec", ZOO_FT_STEPS="12",
             ZOO_CHECKPOINT=os.path.join(workdir, "cells", "mlm"),
             ZOO_STATIC=static)
  return env


def _outputs(nb) -> str:
  """All the text a notebook printed or returned."""
  parts = []
  for cell in nb.cells:
    for out in cell.get("outputs", []):
      parts.append(out.get("text", ""))
      parts.append(out.get("data", {}).get("text/plain", ""))
  return "\n".join(parts)


def test_there_are_three_notebooks_that_only_import():
  assert len(NOTEBOOKS) == 3
  for path in NOTEBOOKS:
    for cell in nbformat.read(path, as_version=4).cells:
      if cell.cell_type == "code":
        assert "def " not in cell.source and "class " not in cell.source, path


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_executes(path, harness, monkeypatch):
  for key, value in harness.items():
    monkeypatch.setenv(key, value)
  nb = nbformat.read(path, as_version=4)
  client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                   resources={"metadata": {"path": REPO}})
  client.execute()
  text = _outputs(nb)
  name = os.path.basename(path)
  if name.startswith("probe"):
    assert "cosine of the contextual vectors" in text and "step 8" in text
    assert "word2vec vectors of 32 dimensions" in text
    assert "[[1. 1. 1.]" in text  # one static vector in every context
  elif name.startswith("compare"):
    assert "few_shot: best" in text and "tasks: ['trec']" in text
  else:
    assert "validation/accuracy" in text and "random init:" in text
    assert "log-likelihood, grammatical:" in text
