"""The comparison harness: a tiny grid end to end, kill and resume, tables,
several processes and workers. Grids and cells: `test_harness_cells.py`."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from configs.compare import smoke

from zoo import compile_cache
from zoo.harness import cells
from zoo.harness import run as harness_run
from tests.child_env import REPO, child_env

pytestmark = pytest.mark.slow  # minutes of training runs: not the quick lane



def _harness(workdir: str, cache: str, flags=(), devices: int = 8,
             only: str = "") -> subprocess.Popen:
  config = "configs/compare/smoke.py" + (f":only={only}" if only else "")
  return subprocess.Popen(
      [sys.executable, "-m", "zoo.compare", "--config",
       os.path.join(REPO, config), "--workdir", workdir,
       *flags], cwd=REPO, env=child_env(cache, devices),
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen) -> tuple[str, str]:
  out, err = proc.communicate(timeout=600)
  assert proc.returncode == 0, err[-3000:]
  return out, err


def _kill_after_checkpoint(workdir: str, cache: str, only: str = "") -> None:
  """Starts the harness and SIGKILLs it once the first cell checkpointed."""
  proc = _harness(workdir, cache, only=only)
  ckpts = os.path.join(workdir, "cells", "mlm", "checkpoints")
  deadline = time.time() + 600
  while time.time() < deadline and proc.poll() is None:
    if os.path.isdir(ckpts) and any(d.isdigit() for d in os.listdir(ckpts)):
      break
    time.sleep(0.2)
  assert proc.poll() is None, "the harness ended before it could be killed"
  proc.send_signal(signal.SIGKILL)
  proc.communicate()


def _rows(workdir: str) -> list[dict]:
  with open(os.path.join(workdir, "results.json"), encoding="utf-8") as f:
    return json.load(f)["rows"]


_VOLATILE = ("seconds", "compile_seconds", "profile")


def _stable(value):
  """results.json without wall-clock times (which differ run to run),
  compile times included."""
  if isinstance(value, dict):
    return {k: _stable(v) for k, v in value.items() if k not in _VOLATILE}
  if isinstance(value, list):
    return [_stable(v) for v in value]
  return value


def _only(results: dict, names: tuple[str, ...]) -> dict:
  """`results` with just the rows `names`, as a run of only those reports
  them (its profile and floors are the run's own)."""
  return dict(results, rows=[r for r in results["rows"] if r["name"] in names])


def _results(workdir: str) -> dict:
  with open(os.path.join(workdir, "results.json"), encoding="utf-8") as f:
    return _stable(json.load(f))


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
  """`(workdir, compile cache, stdout)` of one uninterrupted smoke grid run
  in one process of 8 CPU devices."""
  root = tmp_path_factory.mktemp("smoke")
  cache, whole = str(root / "jax_cache"), str(root / "whole")
  out, _ = _finish(_harness(whole, cache))
  return whole, cache, out


def test_smoke_grid_runs_end_to_end_and_resumes_after_sigkill(tmp_path,
                                                              smoke_run):
  whole, cache, out = smoke_run
  killed = str(tmp_path / "killed")
  assert "| mlm | bert |" in out  # the table is printed
  for name in ("results.md", "results.csv", "results.json", "losses.png",
               "views.png", "finetuning.png"):
    assert os.path.getsize(os.path.join(whole, name)) > 0, name
  results = _results(whole)
  rows = {r["name"]: r for r in results["rows"]}
  assert list(rows) == ["mlm", "clm", "random_bert", "random_gpt2"]
  assert rows["mlm"]["pretrain"]["tokens"] == 8 * 8 * 64
  assert rows["random_bert"]["pretrain"] == {}
  for row in rows.values():
    views = row["views"]
    assert set(views) == {"minimal_pairs", "probe", "few_shot"}
    assert len(views["minimal_pairs"]["items"]) >= 5
    for view in views.values():
      mean, low, high = view["average"]
      assert low <= mean <= high
      assert (view["delta"] is None) == row["name"].startswith("random_")
  assert set(results["floors"]) == {"minimal_pairs", "probe", "few_shot"}

  # The MLM row and its random init, killed and resumed, give the rows of
  # the uninterrupted run.
  _kill_after_checkpoint(killed, cache, only="mlm")
  _, err = _finish(_harness(killed, cache, only="mlm"))
  assert "resumed from step" in err
  want = _only(results, ("mlm", "random_bert"))
  assert _results(killed) == want
  # A finished grid reruns from what is on disk alone.
  _, err = _finish(_harness(killed, cache, only="mlm"))
  assert "resumed from step" not in err and _results(killed) == want


def test_a_random_init_row_runs_the_programs_of_its_pretrained_row(
    smoke_run):
  """A random init is placed as a restored checkpoint is: its views
  compile nothing that its pre-trained row's views did not (jit keys a
  program by its inputs' shardings too)."""
  whole, _, _ = smoke_run
  grid = smoke.get_config()
  inputs = harness_run._Inputs(grid)  # pylint: disable=protected-access
  parsed = {c.name: c for c in cells.parse_cells(grid)}
  trained, random = (harness_run._Backbone(  # pylint: disable=protected-access
      grid, parsed[name], os.path.join(whole, "cells", name), inputs)
                     for name in ("mlm", "random_bert"))
  leaves = lambda b: jax.tree_util.tree_leaves(b.get()[0].params)
  assert ([x.sharding for x in leaves(trained)] ==
          [x.sharding for x in leaves(random)])
  compile_cache.watch()
  for view in ("minimal_pairs", "probe", "few_shot"):
    harness_run._compute(grid, inputs, view, parsed["mlm"], trained)  # pylint: disable=protected-access
    before = compile_cache.compiles()
    harness_run._compute(grid, inputs, view, parsed["random_bert"], random)  # pylint: disable=protected-access
    assert compile_cache.compiles() == before, view


def _assert_same_results(got: dict, want: dict) -> None:
  """Equal results, pre-training losses to float32 rounding."""
  for a, b in zip(got["rows"], want["rows"]):
    np.testing.assert_allclose(
        [a["pretrain"].get(k, 0.0) for k in sorted(b["pretrain"])],
        [b["pretrain"][k] for k in sorted(b["pretrain"])], rtol=1e-6)
    a["pretrain"], b["pretrain"] = {}, {}
  assert got == want


def _free_port() -> int:
  with socket.socket() as sock:
    sock.bind(("127.0.0.1", 0))
    return sock.getsockname()[1]


def test_two_processes_give_the_results_of_one(tmp_path, smoke_run):
  """2 processes x 4 CPU devices run the grid's MLM cell as 1 process x 8
  does: the cell pre-trains across both, the views are dealt out between
  them, and only process 0 writes and prints."""
  whole, cache, _ = smoke_run
  multi = str(tmp_path / "multi")
  port = _free_port()
  procs = [_harness(multi, cache, [
      f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2",
      f"--process_id={i}"], devices=4, only="mlm") for i in range(2)]
  try:
    outs = [_finish(p) for p in procs]
  finally:
    for p in procs:
      p.kill()
  assert "| mlm | bert |" in outs[0][0]
  assert "| mlm | bert |" not in outs[1][0]
  got, want = _results(multi), _only(_results(whole), ("mlm", "random_bert"))
  assert [r["name"] for r in got["rows"]] == ["mlm", "random_bert"]
  # Pre-training losses agree to float32 rounding (the all-reduce across
  # processes sums in another order); every view's predictions are equal.
  _assert_same_results(got, want)


def test_workers_side_by_side_give_the_results_of_one_process(tmp_path,
                                                             smoke_run):
  """`--workers 2`: two pinned processes share the MLM cell and its random
  init, and the parent reports what they stored, as one process would
  have."""
  whole, cache, _ = smoke_run
  side = str(tmp_path / "side")
  out, _ = _finish(_harness(side, cache, ["--workers", "2"], only="mlm"))
  assert "| mlm | bert |" in out and "worker processes side by side" in out
  logs = [open(os.path.join(side, "workers", f"{i}.log"),
               encoding="utf-8").read() for i in range(2)]
  ran = [[line.split(": ")[1].split(" (")[0] for line in log.splitlines()
          if line.startswith("worker ")] for log in logs]
  assert sorted(sum(ran, [])) == ["mlm", "random_bert"]
  assert all(ran)  # both workers took cells
  got, want = _results(side), _only(_results(whole), ("mlm", "random_bert"))
  _assert_same_results(got, want)


def test_cli_needs_all_three_multi_host_flags(tmp_path):
  from absl import flags  # pylint: disable=import-outside-toplevel
  from zoo import compare  # pylint: disable=import-outside-toplevel
  argv = ["compare", "--config", "configs/compare/smoke.py",
          "--workdir", str(tmp_path), "--num_processes", "2"]
  saved = flags.FLAGS.flag_values_dict()
  flags.FLAGS(argv)
  try:
    with pytest.raises(ValueError, match="go together"):
      compare.main(["compare"])
  finally:
    for name in ("num_processes", "config", "workdir"):
      flags.FLAGS[name].present = 0
      flags.FLAGS[name].value = saved[name]
  assert not os.listdir(tmp_path)
