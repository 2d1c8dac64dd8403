"""zoo.finetune.steps: the fine-tuning optimizer's head learning rate."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from data.tasks import Task
from zoo import models
from zoo.finetune import spec as spec_lib
from zoo.finetune import steps


def _spec(**kw):
  config = models.make_config("bert", "tiny")
  task = Task("t", "class", "accuracy", ["a", "b"], {})
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
