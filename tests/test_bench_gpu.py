"""Tests of bench/gpu.sh, run dry on the CPU (ALLOW_CPU=1, tiny models).

A machine lent with a GPU has no package index and only minutes of time, so
the script's whole path is exercised here: running the checkout in place
with a Python that already has JAX, the import check, the summary line.
"""

import os
import pathlib
import re
import subprocess
import sys
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _run(tmp_path, **env):
  base = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  base.update(PY=sys.executable, ALLOW_CPU="1", SIZE="tiny", BATCH="2",
              SEQ_LEN="16", STEPS="1", PEAK_N="128", MODELS="bert-large",
              WHEEL_DIR=str(tmp_path / "no_wheels"),
              SITE=str(tmp_path / "site"), JAX_PLATFORMS="cpu")
  base.update(env)
  return subprocess.run(["bash", str(ROOT / "bench" / "gpu.sh")], env=base,
                        capture_output=True, text=True, timeout=600,
                        check=False)


@pytest.mark.slow
def test_dry_run_prints_the_summary_line(tmp_path):
  venv_before = (ROOT / ".venv-gpu").exists()
  out = _run(tmp_path)
  assert out.returncode == 0, out.stderr[-3000:]
  last = out.stdout.strip().splitlines()[-1]
  assert re.fullmatch(r"gpu bert-large zoo_mfu=\d+\.\d{3}", last), last
  # It ran the checkout in place: nothing was installed.
  assert (ROOT / ".venv-gpu").exists() == venv_before
  assert not (tmp_path / "site").exists()


@pytest.mark.slow
def test_missing_package_is_named_with_the_way_to_bring_it(tmp_path):
  shadow = tmp_path / "shadow" / "ml_collections"
  shadow.mkdir(parents=True)
  (shadow / "__init__.py").write_text(
      "raise ModuleNotFoundError(\"No module named 'ml_collections'\", "
      "name='ml_collections')\n")
  out = _run(tmp_path, PYTHONPATH=str(tmp_path / "shadow"))
  assert out.returncode != 0
  assert "needs the package 'ml_collections'" in out.stderr, out.stderr
  assert "bench/gpu_wheels.sh" in out.stderr


@pytest.mark.slow
def test_refuses_a_cpu_without_the_dry_run_flag(tmp_path):
  out = _run(tmp_path, ALLOW_CPU="0")
  assert out.returncode != 0
  assert "needs a GPU" in out.stderr, out.stderr
