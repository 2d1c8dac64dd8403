"""Checkpoints: exact resume after SIGKILL, restore onto other meshes."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

sys.path.insert(0, os.path.dirname(__file__))
import toy  # pylint: disable=wrong-import-position

from zoo import checkpoint, optim, sharding  # pylint: disable=wrong-import-position
from zoo import train, train_lib as lib  # pylint: disable=wrong-import-position
from zoo.metrics_log import read_metrics  # pylint: disable=wrong-import-position

pytestmark = pytest.mark.slow  # minutes of training runs: not the quick lane

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOY = os.path.join(ROOT, "tests", "toy.py")
N = 4  # checkpoint_every; runs go to 2N


def toy_command(workdir, *flags):
  """The CLI command of a recorded toy run (same for every rerun)."""
  return [sys.executable, TOY, f"--config={TOY}:steps={2 * N}",
          f"--workdir={workdir}", "--record_batches", *flags]


def toy_env(devices: int) -> dict:
  env = dict(os.environ, JAX_PLATFORMS="cpu",
             JAX_NUM_CPU_DEVICES=str(devices))
  env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
  return env


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
  """An uninterrupted 2N-step run on 8 devices, in this process."""
  workdir = str(tmp_path_factory.mktemp("reference"))
  build = lib.build_loader
  toy.record_batches(workdir)
  try:
    config = toy.get_config(f"steps={2 * N}")
    config.keep_checkpoints = 1
    config.eval_steps = 2  # evaluation does not touch the train stream
    final = train.train(config, workdir)
  finally:
    lib.build_loader = build
  return workdir, final


def _params(workdir, step=None):
  state, meta = checkpoint.restore_replicated(workdir, step)
  return jax.device_get(state["params"]), meta


def _wait_for(predicate, proc, seconds=240):
  end = time.time() + seconds
  while not predicate():
    if proc.poll() is not None:
      raise AssertionError(f"run exited early: {proc.communicate()}")
    if time.time() > end:
      proc.kill()
      raise AssertionError("timed out waiting for the run")
    time.sleep(0.1)


def test_resume_after_sigkill_is_exact(reference, tmp_path):
  ref_dir, _ = reference
  workdir = str(tmp_path / "killed")
  proc = subprocess.Popen(toy_command(workdir, f"--hang_after={N + 1}"),
                          env=toy_env(8), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
  ckpt_n = os.path.join(workdir, "checkpoints", str(N))
  batches = os.path.join(workdir, "batches_0.txt")
  _wait_for(lambda: os.path.isdir(ckpt_n) and os.path.exists(batches)
            and len(open(batches).read().split("\n")) > N + 1, proc)
  proc.send_signal(signal.SIGKILL)
  proc.wait(timeout=60)
  assert proc.returncode == -signal.SIGKILL
  assert checkpoint.Checkpointer(workdir).all_steps() == [N]
  done = subprocess.run(toy_command(workdir), env=toy_env(8), timeout=300,
                        capture_output=True, text=True)
  assert done.returncode == 0, done.stderr[-3000:]
  ours, meta = _params(workdir, 2 * N)
  theirs, _ = _params(ref_dir, 2 * N)
  for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs)):
    np.testing.assert_array_equal(a, b)  # bitwise, on CPU
  assert meta["data"] == [{"step": 2 * N}] and meta["step"] == 2 * N
  # The same examples in the same order: batch N+1 was read twice (before
  # the kill and after the resume), identically.
  ref_order = toy.read_batches(ref_dir)
  seen = toy.read_batches(workdir)
  assert [n for n, _ in seen] == list(range(1, N + 2)) + list(
      range(N + 1, 2 * N + 1))
  assert sorted(set(seen)) == ref_order
  losses = [r["loss"] for r in read_metrics(workdir)]
  assert losses[-N:] == [r["loss"] for r in read_metrics(ref_dir)][-N:]


def test_workdir_holds_config_and_last_k(reference):
  workdir, final = reference
  assert checkpoint.Checkpointer(workdir).all_steps() == [2 * N]
  with open(os.path.join(workdir, "config.json"), encoding="utf-8") as f:
    config = json.load(f)
  assert config["steps"] == 2 * N and config["objective"] == "toy_lm"
  assert config["rules"][0] == ["batch", ["data", "fsdp"]]
  assert final["step"] == 2 * N and np.isfinite(final["loss"])
  assert final["eval_weight_sum"] > 0 and np.isfinite(final["eval_loss"])
  assert [r["step"] for r in read_metrics(workdir, "eval")] == [2 * N]
  assert os.listdir(os.path.join(workdir, "tensorboard"))
  _, meta = _params(workdir)
  assert meta["config"] == config and meta["seed"] == 0


def test_eight_device_checkpoint_continues_on_one(reference, tmp_path):
  workdir = str(tmp_path / "one")
  shutil.copytree(reference[0], workdir)
  os.remove(os.path.join(workdir, "batches_0.txt"))
  done = subprocess.run(
      toy_command(workdir, f"--config.steps={2 * N + 2}"), env=toy_env(1),
      timeout=300, capture_output=True, text=True)
  assert done.returncode == 0, done.stderr[-3000:]
  # It resumed at 2N: read only the two new batches, logged only two steps.
  assert [n for n, _ in toy.read_batches(workdir)] == [2 * N + 1, 2 * N + 2]
  rows = read_metrics(workdir)
  assert [r["step"] for r in rows][-2:] == [2 * N + 1, 2 * N + 2]
  assert all(np.isfinite(r["loss"]) for r in rows)
  assert 2 * N + 2 in checkpoint.Checkpointer(workdir).all_steps()
  _restore_on_four_devices(workdir, 2 * N + 2)  # saved on 1, read on 4


def _restore_on_four_devices(workdir, step):
  """Restores `step` onto a (1, 2, 2) mesh; checks layout and values."""
  config = toy.get_config()
  mesh = sharding.make_mesh({"data": 1, "fsdp": 2, "tensor": 2},
                            devices=jax.devices()[:4])
  loader = lib.build_loader(config, "train", 16, 0)
  objective = lib.build_objective(config, lib.specials_of(config, loader))
  setup = lib.setup_state(objective, optim.make(config.optimizer, 8), config,
                          mesh)
  ckpt = checkpoint.Checkpointer(workdir)
  state, _ = ckpt.restore(step, checkpoint.with_shardings(
      setup.abstract, setup.shardings))
  ckpt.close()
  for leaf, want in zip(jax.tree.leaves(state), jax.tree.leaves(
      setup.shardings)):
    assert leaf.sharding == want
  assert state["params"]["w_in"].sharding.spec == P("fsdp", "tensor")
  assert len(state["params"]["w_in"].sharding.device_set) == 4
  full, _ = _params(workdir, step)
  for a, b in zip(jax.tree.leaves(jax.device_get(state["params"])),
                  jax.tree.leaves(full)):
    np.testing.assert_array_equal(a, b)


def test_restore_from_eight_devices_onto_four(reference):
  _restore_on_four_devices(reference[0], 2 * N)


def test_missing_checkpoint_is_a_clear_error(tmp_path):
  with pytest.raises(FileNotFoundError, match="no complete checkpoint in"):
    checkpoint.restore_replicated(str(tmp_path))
  with pytest.raises(FileNotFoundError, match="has no config.json"):
    checkpoint.read_config(str(tmp_path))


def test_relative_workdir_saves_and_restores(tmp_path, monkeypatch):
  """A workdir given relative to the current directory works (Orbax itself
  accepts only absolute paths)."""
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from zoo import checkpoint  # pylint: disable=import-outside-toplevel
  monkeypatch.chdir(tmp_path)
  ckpt = checkpoint.Checkpointer("run", keep=2, async_save=False)
  state = {"w": jnp.arange(4.0)}
  ckpt.save(1, state, {"step": 1})
  ckpt.wait()
  restored, meta = ckpt.restore(1, state)
  ckpt.close()
  assert (tmp_path / "run" / "checkpoints" / "1").is_dir()
  assert meta["step"] == 1
  assert (restored["w"] == state["w"]).all()
