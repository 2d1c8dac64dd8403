"""Tests of bench/step_parts.py: a step split into forward, backward and
update."""

import pathlib
import sys

import pytest

# Appended, not prepended: bench/data.py must not shadow the data package.
sys.path.append(str(pathlib.Path(__file__).resolve().parent.parent / "bench"))
import step_parts  # pylint: disable=g-import-not-at-top,wrong-import-position

pytestmark = pytest.mark.slow  # compiles three programs: not the quick lane


def test_shares_split_the_step():
  got = step_parts.shares({"forward": 0.02, "gradient": 0.05, "step": 0.08})
  assert got == pytest.approx({"forward": 0.25, "backward": 0.375,
                               "update": 0.375})


def test_a_dry_run_times_every_part(capsys):
  step_parts.main(["--models", "bert-base", "--batch", "8", "--seq_len",
                   "16", "--steps", "1", "--rounds", "1"])
  out = capsys.readouterr().out.splitlines()
  assert out[1].startswith("bert-base tiny: forward ")
  assert "gradient " in out[1] and "step " in out[1]
  parts = dict(kv.split("=") for kv in out[-1].split()[1:])
  assert set(parts) == {"forward", "backward", "update"}
  assert sum(map(float, parts.values())) == pytest.approx(1.0, abs=0.02)
