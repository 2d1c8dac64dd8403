"""Two processes on localhost train exactly as one process does."""

import os
import shutil
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import toy  # pylint: disable=wrong-import-position

from zoo import checkpoint, distributed, train  # pylint: disable=wrong-import-position
from zoo import train_lib as lib  # pylint: disable=wrong-import-position
from zoo.metrics_log import read_metrics  # pylint: disable=wrong-import-position

pytestmark = pytest.mark.slow  # minutes of training runs: not the quick lane

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOY = os.path.join(ROOT, "tests", "toy.py")
STEPS = 4
MESH = ["--config.mesh.data=2", "--config.mesh.fsdp=2",
        "--config.mesh.tensor=2"]


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _two_processes(workdir: str, mesh=MESH, ok: bool = True,
                   env=None) -> list[str]:
  """Runs the toy config as 2 processes of 4 CPU devices; their stderr."""
  port = _free_port()
  env = dict(env or os.environ, JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="4")
  env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
  procs = [subprocess.Popen(
      [sys.executable, TOY, f"--config={TOY}:steps={STEPS}",
       f"--workdir={workdir}", "--record_batches", *mesh,
       f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2",
       f"--process_id={i}"], env=env, stdout=subprocess.PIPE,
      stderr=subprocess.PIPE, text=True) for i in range(2)]
  outs = []
  for proc in procs:
    try:
      outs.append(proc.communicate(timeout=300))
    except subprocess.TimeoutExpired:
      for p in procs:
        p.kill()
      raise
  for proc, (_, err) in zip(procs, outs):
    assert (proc.returncode == 0) == ok, err[-3000:]
  return [err for _, err in outs]


def test_a_tensor_axis_across_processes_is_refused(tmp_path):
  """Both processes would hold the one batch shard and feed it different
  rows: refused before anything runs."""
  errs = _two_processes(str(tmp_path), ["--config.mesh.data=1",
                                        "--config.mesh.fsdp=1",
                                        "--config.mesh.tensor=8"], ok=False)
  assert all("held by devices of processes [0, 1]" in e for e in errs)


def test_two_processes_equal_one_with_eight_devices(tmp_path):
  multi = str(tmp_path / "multi")
  _two_processes(multi)
  single = str(tmp_path / "single")
  build = lib.build_loader
  toy.record_batches(single)
  try:
    config = toy.get_config(f"steps={STEPS}")
    config.mesh = {"data": 2, "fsdp": 2, "tensor": 2}
    train.train(config, single)
  finally:
    lib.build_loader = build
  # Only process 0 logged, one line per step, with the single run's losses.
  multi_rows, single_rows = read_metrics(multi), read_metrics(single)
  assert [r["step"] for r in multi_rows] == list(range(1, STEPS + 1))
  np.testing.assert_allclose([r["loss"] for r in multi_rows],
                             [r["loss"] for r in single_rows], rtol=1e-6)
  a, _ = checkpoint.restore_replicated(multi)
  b, _ = checkpoint.restore_replicated(single)
  for x, y in zip(jax.tree.leaves(jax.device_get(a)),
                  jax.tree.leaves(jax.device_get(b))):
    np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)
  # Each process read its own half of every global batch.
  first, second = toy.read_batches(multi, 0), toy.read_batches(multi, 1)
  assert [n for n, _ in first] == [n for n, _ in second] == list(
      range(1, STEPS + 1))
  assert all(x != y for (_, x), (_, y) in zip(first, second))


# The schedule spans 2 * STEPS whatever `steps` is, so a run stopped at
# STEPS and resumed trains as one uninterrupted run.
SAMPLE = {"data.source": "sample", "data.vocab_size": 8000, "seq_len": 64,
          "optimizer.decay_steps": 2 * STEPS}


def _sample_config(steps):
  config = toy.get_config(f"steps={steps}")
  config.mesh = {"data": 2, "fsdp": 2, "tensor": 2}
  config.data.source, config.data.vocab_size = "sample", 8000
  config.seq_len, config.optimizer.decay_steps = 64, 2 * STEPS
  return config


def _recorded_train(config, workdir):
  build = lib.build_loader
  toy.record_batches(workdir)
  try:
    return train.train(config, workdir)
  finally:
    lib.build_loader = build


def test_two_processes_read_the_sample_as_one_and_resume_on_one(tmp_path):
  """The real Grain path: each global batch is bitwise the same whether
  one process or two read it, and the 2-process checkpoint resumes on 1
  process to the batches and numbers of an uninterrupted run."""
  multi, single, resumed = (str(tmp_path / n) for n in
                            ("multi", "single", "resumed"))
  _two_processes(multi, MESH + [f"--config.{k}={v}" for k, v in
                                SAMPLE.items()])
  shutil.copytree(multi, resumed)
  _recorded_train(_sample_config(2 * STEPS), single)
  _recorded_train(_sample_config(2 * STEPS), resumed)
  want = toy.read_rows(single)
  assert toy.read_rows(multi, processes=2) == {
      n: want[n] for n in range(1, STEPS + 1)}
  again = toy.read_rows(resumed)  # process 0's lines, then the resumed run's
  assert {n: again[n] for n in range(STEPS + 1, 2 * STEPS + 1)} == {
      n: want[n] for n in range(STEPS + 1, 2 * STEPS + 1)}
  # The numbers agree to float32 rounding, not bitwise: the all-reduce
  # across processes (gloo) sums in another order than the in-process one.
  losses = {r["step"]: r["loss"] for r in read_metrics(single)}
  for run in (multi, resumed):
    got = {r["step"]: r["loss"] for r in read_metrics(run)}
    np.testing.assert_allclose([got[n] for n in sorted(got)],
                               [losses[n] for n in sorted(got)], rtol=1e-6)
  a, _ = checkpoint.restore_replicated(resumed)
  b, _ = checkpoint.restore_replicated(single)
  for x, y in zip(jax.tree.leaves(jax.device_get(a)),
                  jax.tree.leaves(jax.device_get(b))):
    np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("args,words", [
    (("127.0.0.1:1234", None, None), "go together"),
    (("127.0.0.1:1234", 2, 2), "--process_id 2 is not in [0, 2)"),
])
def test_distributed_flag_errors(args, words):
  with pytest.raises(ValueError) as err:
    distributed.initialize(*args)
  assert words in str(err.value)


def test_allgather_json_single_process():
  assert distributed.allgather_json({"step": 3}) == [{"step": 3}]


def test_the_sample_is_built_once_and_evaluated_to_its_end(tmp_path):
  """Without data.tokenizer, process 0 builds the sample and its tokenizer
  while process 1 waits, then both read them. The sample's 91 validation
  documents split unevenly between the 16 global rows: one process runs
  out of rows first and feeds padding until the other has too, instead of
  leaving it alone in a collective."""
  env = dict(os.environ, ZOO_DATA_DIR=str(tmp_path / "data"))
  workdir = str(tmp_path / "run")
  errs = _two_processes(workdir, MESH + [
      "--config.data.source=sample", "--config.data.vocab_size=8000",
      "--config.seq_len=64", "--config.eval_every=4",
      "--config.eval_steps=100000"], env=env)
  built = ["building the embedded sample" in e for e in errs]
  assert built == [True, False], errs[1][-2000:]
  assert os.path.exists(tmp_path / "data" / "sample" / "BUILT")
  rows = read_metrics(workdir, "eval")
  assert len(rows) == 1 and rows[0]["weight_sum"] > 1000
  assert np.isfinite(rows[0]["loss"])
