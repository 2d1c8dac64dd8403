"""zoo.finetune.steps: the fine-tuning optimizer's head learning rate, and a
head padded to its spec's width."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from data.tasks import Task
from zoo import models
from zoo.compress import magnitude
from zoo.finetune import run as finetune_run
from zoo.finetune import spec as spec_lib
from zoo.finetune import steps


def _spec(labels=("a", "b"), **kw):
  config = models.make_config("bert", "tiny")
  task = Task("t", "class", "accuracy", list(labels), {})
  return dataclasses.replace(spec_lib.make_spec("bert", config, task,
                                                warmup_steps=0), **kw)


def _updates(spec):
  params = {"backbone": {"w": jnp.ones((3, 2))},
            "head": {"w": jnp.ones((2, 2)), "b": jnp.ones(2)}}
  grads = jax.tree_util.tree_map(lambda p: 0.1 * jnp.ones_like(p), params)
  mask = jax.tree_util.tree_map(lambda _: True, params)
  tx = steps.optimizer(spec, mask, params=params)
  updates, _ = tx.update(grads, tx.init(params), params)
  return updates


def test_head_lr_scales_the_head_updates_only():
  one, ten = _updates(_spec()), _updates(_spec(head_lr=10.0))
  np.testing.assert_allclose(ten["backbone"]["w"], one["backbone"]["w"])
  for key in ("w", "b"):  # the bias too: no decay, the same factor
    assert np.abs(one["head"][key]).min() > 0
    np.testing.assert_allclose(ten["head"][key], 10 * one["head"][key],
                               rtol=1e-6)


def test_head_lr_must_be_positive(tok):
  with pytest.raises(ValueError, match="head_lr 0.0 must be positive"):
    spec_lib.check(_spec(head_lr=0.0), tok, {"inputs": 16, "targets": 4})


def test_standardisation_statistics_are_never_trained():
  spec = _spec(standardize=True)
  params = {"backbone": {"w": jnp.ones(2)},
            "head": {"classify": {"standardize": {"mean": jnp.zeros(2),
                                                  "scale": jnp.ones(2)},
                                  "out": {"kernel": jnp.ones((2, 2))}}}}
  mask = steps.trainable(spec, params)
  assert mask["backbone"]["w"] and mask["head"]["classify"]["out"]["kernel"]
  assert not any(jax.tree_util.tree_leaves(
      mask["head"]["classify"]["standardize"]))


def test_a_padded_head_keeps_the_loss_gradients_and_predictions_of_its_classes():
  exact = _spec(labels="abc", pad_labels=False)
  padded = dataclasses.replace(exact, pad_labels=True)
  assert (exact.head_width, padded.head_width) == (3, 8)
  params = finetune_run.init_params(exact, None, 8, jax.random.key(0))
  wide = dict(params, head=steps.padded_head(params["head"], 8))
  rng = np.random.default_rng(0)
  batch = {"tokens": rng.integers(5, 100, (4, 8)).astype(np.int32),
           "token_types": np.zeros((4, 8), np.int32),
           "label": np.asarray([0, 2, 1, 2], np.int32)}
  grad = lambda s, p: jax.value_and_grad(  # pylint: disable=unnecessary-lambda-assignment
      lambda q: steps.head_loss(s, q, batch, jax.random.key(1)))(p)
  (loss, g), (loss_w, g_w) = grad(exact, params), grad(padded, wide)
  assert float(loss_w) == pytest.approx(float(loss), rel=1e-6)
  out, out_w = g["head"]["classify"]["out"], g_w["head"]["classify"]["out"]
  for key in ("kernel", "bias"):  # the held-out classes get exactly 0
    np.testing.assert_allclose(out_w[key][..., :3], out[key], atol=1e-6)
    np.testing.assert_array_equal(out_w[key][..., 3:], 0.0)
  for a, b in zip(jax.tree_util.tree_leaves(g["backbone"]),
                  jax.tree_util.tree_leaves(g_w["backbone"])):
    np.testing.assert_allclose(a, b, atol=1e-6)
  logits = steps.logits_step(padded, wide, batch)
  assert logits.shape == (4, 3)
  np.testing.assert_allclose(logits, steps.logits_step(exact, params, batch),
                             atol=1e-6)
  np.testing.assert_array_equal(
      steps.predict_step(padded, wide, batch)["label"],
      steps.predict_step(exact, params, batch)["label"])


# Biases are left out: a key bias gets no gradient beyond rounding, so the
# ranking of its entries is a tie broken by rounding alone.
@pytest.mark.parametrize("prune", [None, magnitude.Config(
    target=0.5, begin_step=0, end_step=4, frequency=2,
    exclude="embedding,bias")])
def test_scanned_steps_equal_a_loop_of_single_steps(prune):
  """`train_steps` over stacked batches, in two runs of steps, gives the
  losses, params and optimizer state of one jitted step per batch (the
  rng folded with each step's index either way), pruning included."""
  spec = _spec(labels="abc", steps=5)
  params = finetune_run.init_params(spec, None, 8, jax.random.key(0))
  rng, data = jax.random.key(3), np.random.default_rng(0)
  batches = {"tokens": data.integers(5, 100, (5, 4, 8)).astype(np.int32),
             "token_types": np.zeros((5, 4, 8), np.int32),
             "label": data.integers(0, 3, (5, 4)).astype(np.int32)}
  one = jax.jit(steps.train_step, static_argnums=0, static_argnames="prune")
  p, o = params, steps.init_opt_state(spec, params, prune)
  looped = []
  for k in range(5):
    p, o, loss = one(spec, p, o, jax.tree_util.tree_map(
        lambda x, k=k: x[k], batches), jax.random.fold_in(rng, k),
                       prune=prune)
    looped.append(float(loss))
  q, u = params, steps.init_opt_state(spec, params, prune)
  scanned = []
  for first, stop in ((0, 3), (3, 5)):
    q, u, losses = steps.train_steps(spec, q, u, jax.tree_util.tree_map(
        lambda x, a=first, b=stop: x[a:b], batches), rng, np.int32(first),
                                     prune=prune)
    scanned += [float(x) for x in losses]
  np.testing.assert_allclose(scanned, looped, rtol=1e-6)
  assert len(set(looped)) == 5  # every step saw its own batch
  for a, b in zip(jax.tree_util.tree_leaves((p, o)),
                  jax.tree_util.tree_leaves((q, u))):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5,
                               atol=1e-6)
  kernel = q["backbone"]["encoder"]["layer_0"]["mlp"]["wi"]["kernel"]
  zeros = float(np.mean(np.asarray(kernel) == 0))
  assert zeros == (0.5 if prune else 0.0)  # the pruning ran inside


@pytest.mark.parametrize("steps_", [1, 3, 64, 65, 100, 129, 300])
def test_a_run_splits_its_steps_into_at_most_two_program_lengths(steps_):
  most = finetune_run.CHUNK_STEPS
  chunks = finetune_run._chunks(steps_, most)  # pylint: disable=protected-access
  assert sum(chunks) == steps_
  assert max(chunks) <= most
  assert len(set(chunks)) <= 2 and max(chunks) - min(chunks) <= 1
  assert len(chunks) == -(-steps_ // most)
