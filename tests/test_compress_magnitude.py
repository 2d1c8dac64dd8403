"""Gradual magnitude pruning: the cubic schedule, exact sparsity, masks that
stay, the `optimizer.prune` config block, the trainer and fine-tuning."""

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import toy  # pylint: disable=wrong-import-position

from zoo import config as config_lib  # pylint: disable=wrong-import-position
from zoo import optim, sharding  # pylint: disable=wrong-import-position
from zoo import train_lib as lib  # pylint: disable=wrong-import-position
from zoo.compress import magnitude  # pylint: disable=wrong-import-position
from zoo.finetune import spec as spec_lib  # pylint: disable=wrong-import-position
from zoo.finetune import steps as steps_lib  # pylint: disable=wrong-import-position

CUBIC = magnitude.Config(target=0.8, initial=0.0, begin_step=10,
                         end_step=50, frequency=10)


@pytest.mark.parametrize("step, want", [
    (0, 0.0), (9, 0.0), (10, 0.0), (15, 0.0),
    (20, 0.8 - 0.8 * 0.75 ** 3), (29, 0.8 - 0.8 * 0.75 ** 3),
    (30, 0.8 - 0.8 * 0.5 ** 3), (49, 0.8 - 0.8 * 0.25 ** 3),
    (50, 0.8), (1000, 0.8)])
def test_cubic_schedule_held_between_updates(step, want):
  got = float(magnitude.sparsity_at(CUBIC, step))
  assert got == pytest.approx(want, abs=1e-6)


def test_masks_update_every_frequency_and_at_end_step():
  c = magnitude.Config(target=0.5, initial=0.1, begin_step=0, end_step=25,
                       frequency=10)
  due = [t for t in range(40) if bool(magnitude.update_due(c, t))]
  assert due == [0, 10, 20, 25]
  assert float(magnitude.sparsity_at(c, 0)) == pytest.approx(0.1)
  assert float(magnitude.sparsity_at(c, 25)) == pytest.approx(0.5)


def _params(seed=0):
  rng = np.random.default_rng(seed)
  return {"dense": {"kernel": rng.standard_normal((13, 7), np.float32),
                    "bias": rng.standard_normal(7).astype(np.float32)},
          "heads": rng.standard_normal((5, 3, 4)).astype(np.float32),
          "tok": {"embedding": rng.standard_normal((11, 5)).astype(
              np.float32)}}


class _Last(optax.GradientTransformation):
  """SGD at lr 0.1 that keeps the gradient it last saw as its state."""

  def __new__(cls):
    return super().__new__(
        cls, lambda p: jax.tree_util.tree_map(jnp.zeros_like, p),
        lambda g, s, p=None: (jax.tree_util.tree_map(lambda x: -0.1 * x, g),
                              g))


def _run(config, steps, params=None, inner=None):
  """Params and state after `steps` updates with random gradients."""
  tx = magnitude.prune(inner or _Last(), config)
  params = params or _params()
  state = tx.init(params)
  update = jax.jit(tx.update)
  rng = np.random.default_rng(1)
  history = []
  for _ in range(steps):
    grads = jax.tree_util.tree_map(
        lambda p: rng.standard_normal(p.shape).astype(np.float32), params)
    updates, state = update(grads, state, params)
    params = optax.apply_updates(params, updates)
    history.append((params, state, grads, updates))
  return params, state, history


def test_final_sparsity_per_tensor_within_one_weight_and_zeros_stay():
  c = magnitude.Config(target=0.7, initial=0.2, begin_step=2, end_step=8,
                       frequency=3)
  params, state, history = _run(c, 14)
  report = magnitude.sparsity(params)
  for name, size in (("dense/kernel", 91), ("heads", 60)):
    assert abs(report["tensors"][name] * size - round(0.7 * size)) <= 1
  assert "tok/embedding" not in report["tensors"]
  assert np.all(params["tok"]["embedding"] != 0)  # excluded by its path
  assert np.all(params["dense"]["bias"] != 0)  # vectors are never pruned
  # After the first pruning step a zero stays zero, bit for bit, and the
  # masks in the state are exactly where the zeros are.
  zero = np.asarray(history[2][0]["heads"]) == 0
  assert zero.sum() == round(0.2 * 60)
  for p, s, _, _ in history[3:]:
    now = np.asarray(p["heads"]) == 0
    assert np.all(now[zero]) and np.array_equal(now, ~np.asarray(
        s.masks["heads"]))
    zero = now


def test_kept_weights_get_the_inner_update_and_pruned_no_gradient():
  c = magnitude.Config(target=0.5, begin_step=0, end_step=1, frequency=1)
  _, _, history = _run(c, 5)
  # Update 0 prunes to s_i = 0, update 1 to 0.5; from update 2 on the
  # gradient meets a mask with zeros.
  for _, state, grads, updates in history[2:]:
    mask = np.asarray(state.masks["dense"]["kernel"])
    seen = np.asarray(state.inner["dense"]["kernel"])
    want = np.asarray(grads["dense"]["kernel"])
    # The inner optimizer saw the gradient only where the mask keeps.
    np.testing.assert_array_equal(seen, np.where(mask, want, 0))
    np.testing.assert_array_equal(
        np.asarray(updates["dense"]["kernel"])[mask], -0.1 * want[mask])


def test_global_scope_ranks_all_matrices_together():
  params = _params()
  params["heads"] = params["heads"] * 10.0  # large weights survive
  c = magnitude.Config(target=0.6, begin_step=0, end_step=1, frequency=1,
                       scope="global")
  params, _, _ = _run(c, 2, params)
  report = magnitude.sparsity(params)
  assert abs(report["zeros"] - round(0.6 * report["size"])) <= 1
  assert report["tensors"]["heads"] < 0.2 < report["tensors"]["dense/kernel"]


def test_exclude_empty_prunes_embeddings_too():
  c = magnitude.Config(target=0.5, begin_step=0, end_step=1, frequency=1,
                       exclude="")
  params, _, _ = _run(c, 2)
  assert np.mean(np.asarray(params["tok"]["embedding"]) == 0) == \
      pytest.approx(round(0.5 * 55) / 55)


@pytest.mark.parametrize("fields, words", [
    ({"target": 1.0}, "target 1.0 must be in"),
    ({"target": -0.1}, "target -0.1 must be in"),
    ({"target": 0.5, "initial": 0.6}, "initial 0.6 must be in"),
    ({"target": 0.5, "begin_step": 10, "end_step": 10}, "end_step 10 must"),
    ({"target": 0.5, "frequency": 0}, "frequency 0 must be"),
    ({"target": 0.5, "scope": "layer"}, "scope 'layer' is not one of"),
])
def test_bad_settings_name_the_field(fields, words):
  with pytest.raises(ValueError, match=words):
    magnitude.from_block(fields)
  with pytest.raises(ValueError, match=words):
    optim.make(config_lib.complete(dict(
        _MINIMAL, optimizer={"prune": fields})).optimizer, 10)


_MINIMAL = {"model": "bert", "objective": "mlm", "steps": 3,
            "batch_size": 8, "seq_len": 16}


def test_prune_block_is_optional_and_filled_key_by_key():
  off = config_lib.complete(_MINIMAL)
  assert "prune" not in off.optimizer  # runs without it are unchanged
  on = config_lib.complete(dict(_MINIMAL, optimizer={
      "prune": {"target": 0.5, "end_step": 3}}))
  assert on.optimizer.prune.target == 0.5
  assert on.optimizer.prune.frequency == config_lib.prune().frequency
  # The block's defaults are the transformation's.
  assert dict(config_lib.prune()) == magnitude.Config().__dict__
  with pytest.raises(ValueError, match="unknown optimizer.prune key 'goal'"):
    config_lib.complete(dict(_MINIMAL, optimizer={"prune": {"goal": 1}}))
  with pytest.raises(ValueError, match="optimizer.prune.scope=3 is a int"):
    config_lib.complete(dict(_MINIMAL, optimizer={"prune": {"scope": 3}}))
  # Off (absent, or target 0): the optimizer state of a plain AdamW.
  params = _params()
  plain = jax.tree_util.tree_structure(optim.make(off.optimizer, 3).init(
      params))
  zero = config_lib.complete(dict(_MINIMAL, optimizer={"prune": {}}))
  assert jax.tree_util.tree_structure(
      optim.make(zero.optimizer, 3).init(params)) == plain
  assert jax.tree_util.tree_structure(
      optim.make(on.optimizer, 3).init(params)) != plain


def test_trainer_reaches_the_target_with_masks_sharded_like_params():
  config = toy.get_config("steps=8")
  config.optimizer.prune = config_lib.prune()
  config.optimizer.prune.update(target=0.75, initial=0.25, begin_step=1,
                                end_step=5, frequency=2, exclude="table")
  config = config_lib.complete(config)
  mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  loader = lib.build_loader(config, "train", int(config.batch_size), 0)
  objective = lib.build_objective(config, lib.specials_of(config, loader))
  tx = optim.make(config.optimizer, 8)
  setup = lib.setup_state(objective, tx, config, mesh)
  step = lib.make_train_step(objective, tx, config, setup,
                             optim.schedule(config.optimizer, 8))
  state = setup.init(lib.init_rng(0))
  with sharding.activate(mesh, setup.rules):
    for _ in range(8):
      state, metrics = step(state, lib.global_batch(
          next(loader), setup.batch_sharding, 16))
  assert np.isfinite(float(metrics["step_loss"]))
  report = magnitude.sparsity(state["params"], magnitude.excluder("table"))
  assert set(report["tensors"]) == {"w_in", "w_out", "w_sq"}
  for name, p in state["params"].items():
    if name in report["tensors"]:
      assert abs(report["tensors"][name] * p.size - round(0.75 * p.size)) <= 1
    else:
      assert np.all(np.asarray(p) != 0), name
  masks = magnitude.find_state(state["opt_state"]).masks
  for name, p in state["params"].items():
    assert masks[name].sharding.spec == p.sharding.spec, name


def test_finetune_optimizer_prunes_trainable_matrices_only():
  spec = spec_lib.Spec("bert", None, "encoder", "class", mode="frozen",
                       steps=4, warmup_steps=1)
  params = {"backbone": _params(), "head": _params(2)}
  mask = steps_lib.trainable(spec, params)
  prune = magnitude.Config(target=0.5, begin_step=0, end_step=1,
                           frequency=1)
  tx = steps_lib.optimizer(spec, mask, prune)
  state = steps_lib.init_opt_state(spec, params, prune)
  grads = jax.tree_util.tree_map(jnp.ones_like, params)
  for _ in range(2):
    updates, state = tx.update(grads, state, params)
    params = jax.tree_util.tree_map(lambda p, u, t: p + u if t else p,
                                    params, updates, mask)
  assert magnitude.sparsity(params["backbone"])["zeros"] == 0
  head = magnitude.sparsity(params["head"])
  assert head["tensors"]["heads"] == 0.5
  assert abs(head["tensors"]["dense/kernel"] * 91 - round(45.5)) <= 1
