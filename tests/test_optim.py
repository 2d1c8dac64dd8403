"""The trainer's optimizers: SGD's update by hand."""

import jax
import numpy as np
import pytest

from zoo import config as config_lib
from zoo import optim


def _opt(**fields):
  o = config_lib.optimizer()
  o.update(dict(warmup_steps=0, clip_norm=0.0, decay="linear",
                end_lr_ratio=0.5, **fields))
  return o


def test_sgd_steps_on_the_scheduled_rate_with_decay_on_matrices_only():
  params = {"w": np.arange(6, dtype=np.float32).reshape(2, 3),
            "b": np.ones(3, np.float32)}
  grads = {"w": np.full((2, 3), 0.5, np.float32),
           "b": np.full(3, -2.0, np.float32)}
  tx = optim.make(_opt(name="sgd", lr=0.1, weight_decay=0.2), steps=4)
  state = tx.init(params)
  rates = []
  for _ in range(3):
    updates, state = tx.update(grads, state, params)
    rates.append(float(-updates["b"][0] / -2.0))
    np.testing.assert_allclose(
        updates["w"], -rates[-1] * (grads["w"] + 0.2 * params["w"]),
        rtol=1e-6)
  # Linear from 0.1 to 0.05 over 4 steps.
  np.testing.assert_allclose(rates, [0.1, 0.0875, 0.075], rtol=1e-6)


def test_sgd_keeps_no_moments():
  params = {"w": np.ones((4, 4), np.float32)}
  sgd = optim.make(_opt(name="sgd"), steps=4).init(params)
  adam = optim.make(_opt(name="adamw"), steps=4).init(params)
  size = lambda s: sum(np.size(x) for x in jax.tree.leaves(s))
  assert size(sgd) < 16 <= size(adam) - 16


def test_an_unknown_optimizer_is_named():
  with pytest.raises(ValueError, match=r"optimizer.name 'lamb' is not one "
                     r"of \('adamw', 'sgd'\)"):
    optim.make(_opt(name="lamb"), steps=4)
