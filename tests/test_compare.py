"""The comparison harness: a tiny grid end to end, kill and resume, tables."""

import json
import os
import signal
import subprocess
import sys
import time

import jax
import ml_collections
import numpy as np
import pytest

import objectives
from configs.compare import demo, family, smoke, t5_tables
from zoo import compare_lib, models, report

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env(cache: str) -> dict:
  """A subprocess environment: 8 CPU devices, one shared compile cache."""
  env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="8",
             JAX_COMPILATION_CACHE_DIR=cache,
             JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
             JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="-1")
  env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
  return env


def _harness(workdir: str, cache: str) -> subprocess.Popen:
  return subprocess.Popen(
      [sys.executable, "-m", "zoo.compare", "--config",
       os.path.join(REPO, "configs/compare/smoke.py"), "--workdir", workdir],
      cwd=REPO, env=_env(cache), stdout=subprocess.PIPE,
      stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen) -> tuple[str, str]:
  out, err = proc.communicate(timeout=600)
  assert proc.returncode == 0, err[-3000:]
  return out, err


def _kill_after_checkpoint(workdir: str, cache: str) -> None:
  """Starts the harness and SIGKILLs it once the first cell checkpointed."""
  proc = _harness(workdir, cache)
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


def test_smoke_grid_runs_end_to_end_and_resumes_after_sigkill(tmp_path):
  cache = str(tmp_path / "jax_cache")
  whole, killed = str(tmp_path / "whole"), str(tmp_path / "killed")
  out, _ = _finish(_harness(whole, cache))
  assert "| mlm | mlm | bert |" in out  # the table is printed
  for name in ("results.md", "results.csv", "results.json", "losses.png",
               "tasks.png"):
    assert os.path.getsize(os.path.join(whole, name)) > 0, name
  rows = _rows(whole)
  assert [r["name"] for r in rows] == ["mlm", "no_pretraining"]
  mlm, none = rows
  assert mlm["flops_total"] > 0 and none["flops_total"] == 0
  assert len(mlm["scores"]["trec"]) == 2
  assert none["published"]["GLUE"] == 66.22  # the paper's, labelled
  with open(os.path.join(whole, "results.md"), encoding="utf-8") as f:
    assert "Raffel et al. 2020" in f.read()

  _kill_after_checkpoint(killed, cache)
  assert not os.path.exists(os.path.join(killed, "cells", "mlm", "done.json"))
  _, err = _finish(_harness(killed, cache))
  assert "resumed from step" in err
  assert _rows(killed) == rows
  # A finished grid reruns from its done markers alone.
  _, err = _finish(_harness(killed, cache))
  assert "resumed from step" not in err and _rows(killed) == rows


def _fake_result(name: str, scores: dict[str, list[float]]) -> dict:
  runs = {t: [{"seed": i, "score": s} for i, s in enumerate(v)]
          for t, v in scores.items()}
  return {"name": name, "objective": name, "model": "bert", "size": "tiny",
          "t5_row": "", "flops_per_token": 1.0, "flops_total": 2.0,
          "pretrain": {"loss": 3.0}, "runs": runs}


def test_summary_means_and_stds_over_seeds_and_tasks():
  rows = report.summarize(
      [_fake_result("a", {"x": [1.0, 3.0], "y": [10.0, 20.0]})], ["x", "y"])
  assert rows[0]["tasks"]["x"] == pytest.approx((2.0, 2 ** 0.5))
  # Average per seed first: (1+10)/2, (3+20)/2.
  assert rows[0]["average"] == pytest.approx((8.5, 18 ** 0.5))
  text = report.markdown(rows, ["x", "y"], {"x": "accuracy", "y": "f1"},
                         "validation")
  assert "| a | a | bert |" in text and "2.00 ± 1.41" in text
  assert "T5 paper" not in text  # no mirrored row, no published column


def test_flops_estimate_charges_electra_and_bart_more_than_mlm():
  grid = demo.get_config()
  specials = objectives.Specials(vocab_size=8000)
  est = {}
  for name, model in (("mlm", "bert"), ("electra", "electra"),
                      ("bart", "bart")):
    if name not in objectives.names():
      continue
    cell = compare_lib.Cell(name, name, model, "tiny", {}, {})
    est[name] = compare_lib.flops_estimate(
        compare_lib.cell_config(grid, cell), specials)
  assert est["bart"]["flops_per_token"] > est["mlm"]["flops_per_token"]
  if "electra" in est:
    assert est["electra"]["params"] > 0
  budget = demo.PRETRAIN_STEPS * 16 * 64
  assert est["mlm"]["flops_total"] == pytest.approx(
      est["mlm"]["flops_per_token"] * budget)


def test_bad_grids_get_clear_errors():
  grid = smoke.get_config()
  bad = ml_collections.ConfigDict(grid.to_dict())
  bad.cells = [dict(name="x", objective="no_such_scheme", model="bert")]
  with pytest.raises(ValueError, match="no_such_scheme.*not registered"):
    compare_lib.check_grid(bad)
  bad.cells = [dict(name="x", model="bert"), dict(name="x", model="bert")]
  with pytest.raises(ValueError, match="repeated"):
    compare_lib.check_grid(bad)
  bad = ml_collections.ConfigDict(grid.to_dict())
  bad.tasks = ["no_such_task"]
  with pytest.raises(ValueError, match="no_such_task"):
    compare_lib.check_grid(bad)


def test_done_cell_of_another_grid_is_refused(tmp_path):
  grid = smoke.get_config()
  cell = compare_lib.parse_cells(grid)[1]
  compare_lib.write_json(str(tmp_path / compare_lib.DONE),
                         {"fingerprint": "something-else"})
  with pytest.raises(ValueError, match="different grid"):
    compare_lib.run_cell(grid, cell, str(tmp_path))


def test_shipped_grids_are_valid():
  for module in (demo, t5_tables, smoke):
    grid = module.get_config()
    compare_lib.parse_cells(grid)
    assert len(grid.seeds) >= 2
  assert len(demo.get_config().seeds) >= 3
  names = {c["objective"] for c in demo.get_config().cells}
  assert {"", "clm", "mlm", "t5_span", "electra", "bart"} <= names
  assert len(demo.TASKS) >= 3
  rows = {c["t5_row"] for c in t5_tables.get_config().cells}
  assert rows <= set(t5_tables.PUBLISHED) and len(rows) == 14
  fam = family.get_config()
  assert objectives.aliases() == {"t5": "t5_span"}
  schemes = set(objectives.names()) - set(objectives.aliases())
  assert {c["objective"] for c in fam.cells} == schemes | {""}


def test_every_family_cell_backbone_loads_for_finetuning():
  """Each scheme's `backbone()` fits the model fine-tuning builds (shapes
  only: params are zeros of the abstract init)."""
  from zoo import finetune, train_lib  # pylint: disable=import-outside-toplevel
  import data.tasks  # pylint: disable=import-outside-toplevel
  grid = family.get_config()
  specials = objectives.Specials(vocab_size=512)
  task = data.tasks.load("trec")
  for cell in compare_lib.parse_cells(grid):
    if not cell.pretrained:
      continue
    config = compare_lib.cell_config(grid, cell)
    objective = train_lib.build_objective(config, specials)
    example = train_lib.example_batch(int(config.seq_len))
    shapes = jax.eval_shape(objective.init, jax.random.key(0), example)
    zeros = jax.tree_util.tree_map(lambda a: np.zeros(a.shape, a.dtype),
                                   shapes)
    name, model_config, params = objective.backbone(zeros)
    if name not in models.FAMILIES:  # tests/toy.py's scheme, when loaded
      continue
    spec = finetune.make_spec(name, model_config, task, steps=1)
    fresh = jax.eval_shape(finetune.run._fresh, spec, 32, jax.random.key(0))
    loaded = finetune.load_backbone(
        jax.tree_util.tree_map(lambda a: np.zeros(a.shape, a.dtype),
                               fresh["backbone"]), params)
    assert (jax.tree_util.tree_structure(loaded) ==
            jax.tree_util.tree_structure(fresh["backbone"])), cell.name
