"""zoo.harness.parallel: core shares, which cells a worker takes, claims."""

import os
import subprocess
import sys

import pytest

from configs.compare import compress
from zoo.harness import cells as cells_lib
from zoo.harness import parallel


def test_cpu_shares_split_the_cores_contiguously(monkeypatch):
  monkeypatch.setattr(os, "sched_getaffinity", lambda _: {4, 0, 1, 2, 3})
  assert parallel.cpu_shares(2) == [[0, 1, 2], [3, 4]]
  assert parallel.cpu_shares(5) == [[0], [1], [2], [3], [4]]
  assert parallel.cpu_shares(1) == [[0, 1, 2, 3, 4]]
  for bad in (0, 6):
    with pytest.raises(ValueError, match="use 1 to 5 workers"):
      parallel.cpu_shares(bad)


def test_cells_that_read_another_cell_are_left_to_the_parent():
  grid = compress.get_config()
  taken = {c.name: parallel.independent(c)
           for c in cells_lib.check_grid(grid)}
  assert not taken["distil"] and not taken["tinybert"] and not taken["int8"]
  assert taken["teacher"] and taken["pruned50"] and taken["random_bert"]


def test_a_claim_is_won_once(tmp_path):
  assert parallel.claim(str(tmp_path), "0-mlm")
  assert not parallel.claim(str(tmp_path), "0-mlm")
  assert parallel.claim(str(tmp_path), "0-clm")


def test_a_worker_runs_its_command_as_one_worker_of_the_claims():
  cmd = parallel.worker_command(
      ["zoo/compare.py", "--config", "c.py", "--workers", "2"], "/w/claims")
  assert cmd[1:4] == ["-m", "zoo.compare", "--config"]
  assert cmd[-2:] == ["--workers=1", "--claims=/w/claims"]


def test_a_pinned_command_sees_only_its_cpus():
  cpu = sorted(os.sched_getaffinity(0))[-1]
  show = [sys.executable, "-c",
          "import os, sys; print(sorted(os.sched_getaffinity(0)), "
          "sys.argv[1:])", "a b", "c"]
  out = subprocess.run(parallel.pinned(show, [cpu]), capture_output=True,
                       text=True, check=True).stdout
  assert out.strip() == f"[{cpu}] ['a b', 'c']"
