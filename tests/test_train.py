"""The one trainer on a toy objective: sharding, learning, accumulation,
non-finite losses, configs."""

import importlib
import os
import sys

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

sys.path.insert(0, os.path.dirname(__file__))
import toy  # pylint: disable=wrong-import-position

from zoo import checkpoint, optim, sharding  # pylint: disable=wrong-import-position
from zoo import config as config_lib  # pylint: disable=wrong-import-position
from zoo import train, train_lib as lib  # pylint: disable=wrong-import-position
from zoo.metrics_log import read_metrics  # pylint: disable=wrong-import-position
from zoo.plan import chips, flops  # pylint: disable=wrong-import-position

# The toy's logical axes under DEFAULT_RULES on a (data, fsdp, tensor) mesh.
EXPECTED = {"table": P("tensor", "fsdp"), "w_in": P("fsdp", "tensor"),
            "b_in": P("tensor"), "w_out": P("tensor", "fsdp"),
            "w_sq": P("fsdp", None)}


def _pieces(config, mesh):
  loader = lib.build_loader(config, "train", int(config.batch_size), 0)
  objective = lib.build_objective(config, lib.specials_of(config, loader))
  tx = optim.make(config.optimizer, int(config.steps))
  setup = lib.setup_state(objective, tx, config, mesh)
  step = lib.make_train_step(objective, tx, config, setup,
                             optim.schedule(config.optimizer, 8))
  return loader, setup, step


def _one_device():
  return sharding.make_mesh({"data": 1}, devices=jax.devices()[:1])


def _param_name(path) -> str | None:
  keys = [getattr(k, "key", getattr(k, "name", None)) for k in path]
  return next((k for k in reversed(keys) if k in EXPECTED), None)


def test_sharded_step_on_2x2x2_mesh_places_every_leaf():
  config = toy.get_config()
  mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  loader, setup, step = _pieces(config, mesh)
  local = next(loader)
  state = setup.init(lib.init_rng(0))
  with sharding.activate(mesh, setup.rules):
    state, metrics = step(state, lib.global_batch(local, setup.batch_sharding,
                                                  16))
  assert np.isfinite(float(metrics["step_loss"]))
  checked = 0
  for tree in (state["params"], state["opt_state"]):
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
      name = _param_name(path)
      want = EXPECTED[name] if name else P()
      assert leaf.sharding.mesh.shape == mesh.shape
      assert leaf.sharding.spec == want, jax.tree_util.keystr(path)
      checked += 1
  assert checked == 5 * 3 + 2  # params, Adam's mu and nu, two counts
  # The sharded step computes what one device computes.
  mesh1 = _one_device()
  _, setup1, step1 = _pieces(config, mesh1)
  state1 = setup1.init(lib.init_rng(0))
  with sharding.activate(mesh1, setup1.rules):
    state1, metrics1 = step1(state1, lib.global_batch(
        local, setup1.batch_sharding, 16))
  np.testing.assert_allclose(metrics["step_loss"], metrics1["step_loss"],
                             rtol=1e-5)
  for a, b in zip(jax.tree.leaves(state["params"]),
                  jax.tree.leaves(state1["params"])):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def _run_steps(config, mesh, batch, n):
  """Params and per-step losses of `n` steps on one fixed local batch."""
  _, setup, step = _pieces(config, mesh)
  losses = []
  state = setup.init(lib.init_rng(0))
  with sharding.activate(mesh, setup.rules):
    for _ in range(n):
      state, metrics = step(state, lib.global_batch(
          batch, setup.batch_sharding, int(config.batch_size)))
      losses.append(float(metrics["step_loss"]))
  return state, losses


def test_loss_halves_overfitting_a_fixed_batch():
  config = toy.get_config("steps=40")
  config.objective_args = {"dropout": 0.0}
  config.optimizer.lr = 3e-2
  batch = next(lib.build_loader(config, "train", 16, 0))
  _, losses = _run_steps(config, _one_device(), batch, 40)
  assert losses[-1] < 0.5 * losses[0], losses


def test_microbatches_equal_one_big_batch():
  config = toy.get_config()
  config.objective_args = {"dropout": 0.0}
  batch = next(lib.build_loader(config, "train", 16, 0))
  big, big_losses = _run_steps(config, _one_device(), batch, 2)
  config.microbatches = 4
  small, small_losses = _run_steps(config, _one_device(), batch, 2)
  np.testing.assert_allclose(small_losses, big_losses, rtol=1e-5)
  for a, b in zip(jax.tree.leaves(small["params"]),
                  jax.tree.leaves(big["params"])):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
  # The rows of every microbatch differ in padding, so an unweighted mean
  # of microbatch means would not match: the weighting is what is tested.
  weights = (batch["tokens"][:, 1:] != 0).sum(1).reshape(4, 4).sum(0)
  assert len(set(weights.tolist())) > 1


def _poison(monkeypatch, at_batch: int, poison_id: int):
  """The train loader's batch number `at_batch` gets a poison token."""
  build = lib.build_loader

  def wrapped(config, split, batch_size, seed, rows=None):
    loader = build(config, split, batch_size, seed, rows)
    if split != "train":
      return loader
    inner_next = type(loader).__next__

    class Poisoned(type(loader)):
      def __next__(self):
        out = inner_next(self)
        if self.step == at_batch:
          out["tokens"][0, 3] = poison_id
        return out
    loader.__class__ = Poisoned
    return loader

  monkeypatch.setattr(lib, "build_loader", wrapped)


def test_nonfinite_loss_stops_naming_the_step(tmp_path, monkeypatch):
  _poison(monkeypatch, at_batch=6, poison_id=150)
  config = toy.get_config("steps=8")
  config.objective_args = {"poison_id": 150}
  config.mesh = {"data": 2, "fsdp": 1, "tensor": 1}
  monkeypatch.setattr(jax, "devices", lambda *a: jax.local_devices()[:2])
  with pytest.raises(FloatingPointError) as err:
    train.train(config, str(tmp_path / "stop"))
  assert "non-finite loss or gradient at step 6" in str(err.value)
  assert "last good checkpoint (step 4) kept" in str(err.value)
  assert checkpoint.Checkpointer(str(tmp_path / "stop")).all_steps() == [4]
  config.skip_nonfinite = True
  final = train.train(config, str(tmp_path / "skip"))
  assert final["step"] == 8 and np.isfinite(final["grad_norm"])
  rows = read_metrics(str(tmp_path / "skip"))
  assert [r["nonfinite"] for r in rows] == [0, 0, 0, 0, 0, 1, 0, 0]
  assert np.isnan(rows[5]["step_loss"]) and np.isfinite(rows[6]["loss"])


def test_nonfinite_loss_before_any_checkpoint_says_so(tmp_path, monkeypatch):
  _poison(monkeypatch, at_batch=1, poison_id=150)
  config = toy.get_config("steps=8")
  config.objective_args = {"poison_id": 150}
  with pytest.raises(FloatingPointError, match="non-finite loss or gradient "
                     "at step 1; the run stopped with no checkpoint written "
                     "yet in"):
    train.train(config, str(tmp_path / "early"))


def test_guarded_update_applies_or_keeps_everything():
  params = {"w": np.arange(6, dtype=np.float32).reshape(2, 3),
            "b": np.ones(3, np.float32)}
  grads = jax.tree_util.tree_map(lambda p: 0.1 * p + 0.5, params)
  opt_cfg = toy.get_config().optimizer
  opt_cfg.warmup_steps = 0  # a non-zero first update
  tx = optim.make(opt_cfg, 10)
  opt_state = tx.init(params)
  updates, want_state = tx.update(grads, opt_state, params)
  want = jax.tree_util.tree_map(lambda p, u: p + u, params, updates)
  got, got_state = jax.jit(lib.guarded_update, static_argnums=0)(
      tx, True, grads, params, opt_state)
  for a, b in zip(jax.tree_util.tree_leaves((want, want_state)),
                  jax.tree_util.tree_leaves((got, got_state))):
    np.testing.assert_allclose(a, b, rtol=1e-6)
  kept, kept_state = jax.jit(lib.guarded_update, static_argnums=0)(
      tx, False, grads, params, opt_state)
  for a, b in zip(jax.tree_util.tree_leaves((params, opt_state)),
                  jax.tree_util.tree_leaves((kept, kept_state))):
    np.testing.assert_array_equal(a, b)
  assert not np.allclose(want["w"], params["w"])


@pytest.mark.parametrize("changes,words", [
    ({"batch_size": 12}, "microbatch of 12 rows (batch_size 12 / "
     "microbatches 1) is not divisible by the 8 batch shards"),
    ({"microbatches": 3}, "batch_size 16 is not divisible by microbatches 3"),
    ({"mesh": {"data": 3}}, "has 3 devices but there are 8"),
    ({"optimizer.decay": "step"}, "optimizer.decay 'step' is not one of"),
    ({"optimizer.name": "lamb"}, "optimizer.name 'lamb' is not one of"),
    ({"eval_step": 3}, "unknown config keys ['eval_step']"),
])
def test_config_errors(tmp_path, changes, words):
  config = toy.get_config()
  for key, value in changes.items():
    node, _, leaf = key.rpartition(".")
    (config[node] if node else config)[leaf] = value
  with pytest.raises(ValueError) as err:
    train.train(config, str(tmp_path))
  assert words in str(err.value)


@pytest.mark.parametrize("name", ["bert_mlm", "gpt2_clm", "t5_span"])
def test_configs_have_every_key(name):
  module = importlib.import_module(f"configs.{name}")
  config = module.get_config("tiny")
  assert set(config.keys()) == set(config_lib.base_config().keys())
  assert config.size == "tiny" and config.steps <= 50
  assert config.data.source == "sample"
  assert module.get_config("size=base,steps=7").steps == 7
  with pytest.raises(ValueError, match="'stepz' is not a config key"):
    module.get_config("stepz=3")


def test_metrics_are_ratios_of_sums():
  from zoo.metrics_log import summarize  # pylint: disable=import-outside-toplevel
  out = summarize({"steps": 2.0, "step_loss": 6.0, "loss_sum": 30.0,
                   "weight_sum": 10.0, "gen_loss_sum": 8.0,
                   "gen_weight_sum": 4.0, "correct_sum": 5.0})
  assert out == {"step_loss": 3.0, "loss": 3.0, "weight_sum": 10.0,
                 "gen_loss": 2.0, "gen_weight_sum": 4.0, "correct": 0.5}


@pytest.mark.slow
def test_char_cnn_elmo_pretrains_through_the_trainer(tmp_path):
  """ELMo's character CNN reads the characters of the tokenizer's pieces,
  looked up inside the step from the table `zoo.train` builds."""
  config = importlib.import_module("configs.elmo_bilm").get_config("tiny")
  config.data.source = "sample"
  config.model_args = {"char_cnn": True}
  config.update(steps=3, batch_size=8, seq_len=32, eval_steps=0,
                log_every=1, checkpoint_every=3)
  final = train.train(config, str(tmp_path))
  assert np.isfinite(final["loss"])
  params = checkpoint.restore_replicated(str(tmp_path), 3)[0]["params"]
  assert "char_cnn" in params["model"] and "token_embedding" not in str(
      jax.tree_util.tree_structure(params["model"]))
  with pytest.raises(ValueError, match="has no tokenizer"):
    config.data.source = "synthetic"
    train.train(config, str(tmp_path / "synthetic"))


def test_logs_tokens_per_chip_and_mfu_where_the_chip_is_known(tmp_path,
                                                               monkeypatch):
  config = toy.get_config("steps=4")
  config.log_every = 2
  train.train(config, str(tmp_path / "cpu"))
  rows = read_metrics(str(tmp_path / "cpu"))
  for r in rows:  # a CPU has no published peak: no MFU
    assert r["tokens_per_s_per_chip"] == pytest.approx(
        r["tokens_per_s"] / jax.device_count())
    assert "mfu" not in r
  fake = chips.Chip("fake", peak_flops=1e9, hbm_bytes=1, hbm_bw=1, ici_bw=1,
                    dcn_bw=1)
  monkeypatch.setattr(train.chips_lib, "of_device", lambda device: fake)
  train.train(config, str(tmp_path / "known"))
  rows = read_metrics(str(tmp_path / "known"))
  tokens = int(config.batch_size) * int(config.seq_len)
  # MFU = step FLOPs x steps/s / (chips x peak), with the step's matmul
  # FLOPs counted from its jaxpr.
  loader, setup, step = _pieces(config, sharding.make_mesh(config.mesh))
  batch = lib.global_batch(next(loader), setup.batch_sharding,
                           int(config.batch_size))
  state = setup.init(lib.init_rng(0))
  expected = flops.count(step.trace(state, batch).jaxpr)
  assert expected > 0
  implied = [r["mfu"] * jax.device_count() * 1e9 * tokens / r["tokens_per_s"]
             for r in rows]
  np.testing.assert_allclose(implied, expected, rtol=1e-6)


def test_the_masked_acoustic_model_trains_on_speech_rows(tmp_path,
                                                         speech_dir):
  """Speech batches (float frames) through the one trainer: sharded on a
  2 x 2 x 2 mesh, checkpointed, resumed, evaluated."""
  config = importlib.import_module("configs.mockingjay_mam").get_config(
      "tiny")
  config.data.path = str(speech_dir)
  config.mesh = {"data": 2, "fsdp": 2, "tensor": 2}
  config.update(steps=4, batch_size=8, seq_len=96, log_every=2,
                checkpoint_every=2, eval_every=4, eval_steps=2)
  final = train.train(config, str(tmp_path))
  assert np.isfinite(final["loss"]) and final["eval_weight_sum"] > 0
  config.steps = 6
  again = train.train(config, str(tmp_path))
  assert np.isfinite(again["loss"])
  from zoo import loading  # pylint: disable=import-outside-toplevel
  loaded = loading.load(str(tmp_path))
  assert loaded.step == 6 and loaded.family == "mockingjay"
  assert loaded.tokenizer is None
