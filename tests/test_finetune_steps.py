"""zoo.finetune.steps: the fine-tuning optimizer's head learning rate, and a
head padded to its spec's width."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from data.tasks import Task
from zoo import models
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
