"""Transformer-XL through the one trainer: stream rows and a segment memory
carried in the train state (step 0, sharding, exact resume after SIGKILL)."""

import os
import signal
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

sys.path.insert(0, os.path.dirname(__file__))
import toy  # pylint: disable=wrong-import-position
from test_checkpoint import TOY, _wait_for, toy_env  # pylint: disable=wrong-import-position

import objectives  # pylint: disable=wrong-import-position
from configs import transfo_xl_clm  # pylint: disable=wrong-import-position
from objectives import memory as memory_lib  # pylint: disable=wrong-import-position
from zoo import checkpoint, optim, sharding  # pylint: disable=wrong-import-position
from zoo import train, train_lib as lib  # pylint: disable=wrong-import-position

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "configs", "transfo_xl_clm.py")
N, ROWS = 4, 8  # checkpoint_every (runs go to 2N); global batch
ARG = (f"tiny,steps={2 * N},batch_size={ROWS},seq_len=32,"
       f"checkpoint_every={N},log_every=1,eval_steps=0")


def _config(memory: bool, **model_args):
  config = transfo_xl_clm.get_config(ARG)
  config.data.mode = "stream"
  config.objective_args.memory = memory
  config.model_args.update(model_args)
  return config


def _pieces(config, mesh, specials):
  objective = lib.build_objective(config, specials)
  tx = optim.make(config.optimizer, int(config.steps))
  setup = lib.setup_state(objective, tx, config, mesh)
  step = lib.make_train_step(objective, tx, config, setup,
                             optim.schedule(config.optimizer, 8))
  return setup, step


def _run(config, mesh, stream):
  """The state and per-step losses after training on `stream`'s batches."""
  specials, batches = stream
  setup, step = _pieces(config, mesh, specials)
  state, losses = setup.init(lib.init_rng(0)), []
  with sharding.activate(mesh, setup.rules):
    for batch in batches:
      state, metrics = step(state, lib.global_batch(
          batch, setup.batch_sharding, ROWS))
      losses.append(float(metrics["step_loss"]))
  return state, losses


def _one_device():
  return sharding.make_mesh({"data": 1}, devices=jax.devices()[:1])


@pytest.fixture(scope="module")
def stream():
  """The sample's specials and the first 3 batches of its stream rows."""
  config = _config(True)
  loader = lib.build_loader(config, "train", ROWS, 0)
  return lib.specials_of(config, loader), [next(loader) for _ in range(3)]


def test_memory_slots_follow_the_open_document():
  config = type("C", (), dict(num_layers=1, mem_len=4, embed_dim=2))
  memory = sharding.unbox(memory_lib.zeros(config, 1))
  new_mems = [jnp.ones((1, 4, 2))]
  # Document 1 ends (EOS = 1) at position 1; document 2 goes on.
  memory = memory_lib.advance(memory, new_mems, jnp.array([[5, 1, 6]]),
                              jnp.array([[1, 1, 2]]), eos=1)
  assert memory["valid"].tolist() == [[False, True, True, True]]
  assert memory["open"].tolist() == [[False, False, False, True]]
  doc_ids = jnp.array([[1, 1, 2]])  # document 2 of before, then a new one
  seen = memory_lib.visible(memory, doc_ids, True)
  assert seen.tolist() == [[[False, False, False, True]] * 2 +
                           [[False] * 4]]
  assert memory_lib.visible(memory, doc_ids, False).tolist() == [
      [[False, True, True, True]] * 3]
  memory = memory_lib.advance(memory, new_mems, jnp.array([[7, 1, 8]]),
                              doc_ids, eos=1)
  assert memory["open"].tolist() == [[False, False, False, True]]
  memory = memory_lib.advance(memory, new_mems, jnp.array([[9, 9, 9]]),
                              jnp.array([[1, 1, 1]]), eos=1)
  assert memory["open"].tolist() == [[True, True, True, True]]


def test_memory_changes_the_loss_after_step_0_only(stream):
  off_state, off = _run(_config(False, dropout_rate=0.0), _one_device(),
                        stream)
  on_state, on = _run(_config(True, dropout_rate=0.0), _one_device(),
                      stream)
  assert "memory" not in off_state
  np.testing.assert_allclose(on[0], off[0], rtol=1e-6)
  assert not np.isclose(on[1], off[1], rtol=1e-5, atol=0)
  assert not np.isclose(on[2], off[2], rtol=1e-5, atol=0)
  memory = jax.device_get(on_state["memory"])
  layers, mem_len = 2, 64  # tiny: 2 layers, mem_len 64 = two rows
  assert memory["mems"].shape == (layers, ROWS, mem_len, 64)
  assert memory["valid"].all() and memory["open"].any()


def test_sharded_memory_step_equals_one_device(stream):
  mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  two = (stream[0], stream[1][:2])
  state, losses = _run(_config(True), mesh, two)
  assert state["memory"]["mems"].sharding.spec == P(
      None, ("data", "fsdp"), None, None)
  assert state["memory"]["valid"].sharding.spec == P(("data", "fsdp"), None)
  state1, losses1 = _run(_config(True), _one_device(), two)
  np.testing.assert_allclose(losses, losses1, rtol=1e-5)
  for a, b in zip(jax.tree.leaves(jax.device_get(state["memory"])),
                  jax.tree.leaves(jax.device_get(state1["memory"]))):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
  for a, b in zip(jax.tree.leaves(state["params"]),
                  jax.tree.leaves(state1["params"])):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_memory_errors():
  specials = objectives.Specials(vocab_size=512)
  with pytest.raises(ValueError, match="needs a Transformer-XL"):
    objectives.build("clm", model="gpt2", size="tiny", specials=specials,
                     memory=True)
  with pytest.raises(ValueError, match="needs mem_len > 0"):
    objectives.build("clm", model="transfo_xl", size="tiny",
                     specials=specials, memory=True,
                     model_args={"mem_len": 0})
  config = _config(True)
  config.microbatches = 2
  with pytest.raises(ValueError, match="trains with microbatches=1, not 2"):
    _pieces(config, _one_device(), objectives.Specials(vocab_size=8000))


def test_evaluation_carries_the_memory(tmp_path):
  config = _config(True, dropout_rate=0.0)
  config.update(steps=2, checkpoint_every=2, eval_steps=3, eval_every=0,
                log_every=2)
  config.data.mode = "packed"  # rows continue across steps either way
  final = train.train(config, str(tmp_path))
  again = train.evaluate(config, str(tmp_path), batches=3)
  # The trainer's evaluation is the public one: the memory starts empty.
  np.testing.assert_allclose(final["eval_loss"], again["loss"], rtol=1e-6)
  readings = {}
  for mem_len in (0, 32, 96):
    c = _config(mem_len > 0, dropout_rate=0.0, mem_len=max(mem_len, 1))
    c.data.mode = "packed"
    readings[mem_len] = train.evaluate(c, str(tmp_path), batches=3)
  targets = {r["weight_sum"] for r in readings.values()}
  assert len(targets) == 1 and targets.pop() > 0  # the same targets
  losses = [readings[m]["loss"] for m in (0, 32, 96)]
  assert len(set(np.round(losses, 6))) == 3  # memory changes what it reads
  one = train.evaluate(c, str(tmp_path), batches=1)
  assert one["weight_sum"] < readings[96]["weight_sum"]


def _command(workdir, memory, *flags):
  return [sys.executable, TOY, f"--config={CONFIG}:{ARG}",
          f"--workdir={workdir}", "--config.data.mode=stream",
          f"--config.objective_args.memory={memory}", "--record_batches",
          *flags]


def _kill_after_checkpoint(workdir, memory):
  """Runs to the hang after batch N + 1 (checkpoint N saved), SIGKILLs."""
  proc = subprocess.Popen(_command(workdir, memory, f"--hang_after={N + 1}"),
                          env=toy_env(8), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
  ckpt_n = os.path.join(workdir, "checkpoints", str(N))
  batches_file = os.path.join(workdir, "batches_0.txt")
  _wait_for(lambda: os.path.isdir(ckpt_n) and os.path.exists(batches_file)
            and len(open(batches_file).read().split("\n")) > N + 1, proc)
  proc.send_signal(signal.SIGKILL)
  proc.wait(timeout=60)
  assert checkpoint.Checkpointer(workdir).all_steps() == [N]


@pytest.mark.slow
@pytest.mark.parametrize("memory", [False, True])
def test_stream_run_resumes_exactly_after_sigkill(tmp_path, memory):
  ref = str(tmp_path / "reference")
  build = lib.build_loader
  toy.record_batches(ref)
  try:
    train.train(_config(memory), ref)
  finally:
    lib.build_loader = build
  workdir = str(tmp_path / "killed")
  _kill_after_checkpoint(workdir, memory)
  done = subprocess.run(_command(workdir, memory), env=toy_env(8),
                        timeout=400, capture_output=True, text=True)
  assert done.returncode == 0, done.stderr[-3000:]
  ours, meta = checkpoint.restore_replicated(workdir, 2 * N)
  theirs, _ = checkpoint.restore_replicated(ref, 2 * N)
  assert ("memory" in ours) == memory
  if memory:  # the memory the resumed run read was the saved one
    assert np.asarray(ours["memory"]["valid"]).all()
  for a, b in zip(jax.tree.leaves(jax.device_get(ours)),
                  jax.tree.leaves(jax.device_get(theirs))):
    np.testing.assert_array_equal(a, b)  # params, optimizer, memory
  assert meta["data"][0]["mode"] == "stream"
  # Every row read on from where it stopped: the same rows, in order.
  assert sorted(set(toy.read_batches(workdir))) == toy.read_batches(ref)
