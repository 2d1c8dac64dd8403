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


def test_cells_that_read_another_cell_wait_for_its_pretraining(tmp_path):
  cells = {c.name: c for c in cells_lib.check_grid(compress.get_config())}
  ready = lambda: {n for n, c in cells.items()
                   if parallel.ready(c, str(tmp_path))}
  readers = {"distil", "tinybert", "int8"}
  assert not ready() & readers
  assert {"teacher", "pruned50", "random_bert"} <= ready()
  (tmp_path / "teacher").mkdir()
  (tmp_path / "teacher" / "pretrain.json").write_text("{}")
  assert readers <= ready()


def test_a_worker_runs_each_cell_once_its_teacher_is_done(tmp_path):
  grid = compress.get_config()
  claims = tmp_path / "claims"
  claims.mkdir()
  ran = []

  def run_cell(replica, cell, celldir, inputs, tick):
    del replica, inputs, tick
    ran.append(cell.name)
    os.makedirs(celldir, exist_ok=True)
    if cell.objective:
      with open(os.path.join(celldir, "pretrain.json"), "w") as f:
        f.write("{}")

  done = parallel.work(grid, str(tmp_path / "w"), str(claims), run_cell,
                       lambda: None, poll=0.0)
  names = [c.name for c in cells_lib.check_grid(grid)]
  assert done == len(names) and sorted(ran) == sorted(names)
  assert ran.index("teacher") < min(ran.index(n) for n in
                                    ("distil", "tinybert", "int8"))
  assert all((claims / f"0-{n}{parallel.DONE}").exists() for n in names)


def test_a_worker_waits_for_a_teacher_another_worker_runs(tmp_path):
  grid = compress.get_config()
  claims, cells = tmp_path / "claims", tmp_path / "w" / "cells"
  claims.mkdir()
  (claims / "0-teacher").touch()  # another worker pre-trains it
  ran = []

  def run_cell(replica, cell, celldir, inputs, tick):
    del replica, celldir, inputs, tick
    ran.append(cell.name)
    if len(ran) == 3:  # meanwhile the other worker finishes the teacher
      (cells / "teacher").mkdir(parents=True)
      (cells / "teacher" / "pretrain.json").write_text("{}")

  parallel.work(grid, str(tmp_path / "w"), str(claims), run_cell,
                lambda: None, poll=0.0)
  assert "teacher" not in ran
  assert {"distil", "tinybert", "int8"} <= set(ran)
  assert ran.index("distil") > 2  # taken on a later pass, once ready


def test_a_worker_leaves_a_cell_whose_done_source_never_pretrained(tmp_path):
  # The teacher's claim is done but it left no pretrain.json (as a
  # random-init source would): its readers can never become ready, so the
  # worker returns and leaves them to the parent rather than waiting.
  grid = compress.get_config()
  claims = tmp_path / "claims"
  claims.mkdir()
  for name in ("0-teacher", f"0-teacher{parallel.DONE}"):
    (claims / name).touch()
  ran = []
  parallel.work(grid, str(tmp_path / "w"), str(claims),
                lambda r, cell, d, i, t: ran.append(cell.name), lambda: None,
                poll=0.0)
  assert ran and not {"teacher", "distil", "tinybert", "int8"} & set(ran)


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
