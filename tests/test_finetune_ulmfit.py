"""ULMFiT's fine-tuning pieces: layer groups, discriminative rates, the
slanted triangular schedule, gradual unfreezing."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from zoo import models
from zoo.finetune import ulmfit


def _params(family="bert", **overrides):
  config = models.make_config(family, "tiny", **overrides)
  backbone = models.init_params(family, config, jax.random.key(0))
  return {"backbone": backbone, "head": {"kernel": jnp.ones((4, 3))}}


def test_groups_run_from_the_token_layer_to_the_head():
  params = _params(num_layers=2)
  groups, top = ulmfit.layer_groups(params)
  assert top == 4
  bb = groups["backbone"]
  assert bb["embeddings"]["token"]["embedding"] == 0
  assert bb["encoder"]["layer_0"]["mlp"]["wi"]["kernel"] == 1
  assert bb["encoder"]["layer_1"]["mlp"]["wi"]["kernel"] == 2
  assert bb["pooler"]["kernel"] == 3  # above the layers, below the head
  assert groups["head"]["kernel"] == 4


def test_a_scanned_stack_gets_a_group_per_slice():
  groups, top = ulmfit.layer_groups(_params(num_layers=3, scan_layers=True))
  kernel = groups["backbone"]["encoder"]["layers"]["block"]["mlp"]["wi"][
      "kernel"]
  assert top == 5 and np.asarray(kernel).tolist() == [1, 2, 3]


def test_lstm_layers_are_groups_too():
  groups, top = ulmfit.layer_groups(_params("awd_lstm"))
  assert top == 4 and groups["backbone"]["lstm_1"]["bias"] == 2
  assert groups["backbone"]["token_embedding"] == 0


def _sgd_step(tx, params):
  """The update of unit gradients after one step of `tx` then SGD at 1."""
  grads = jax.tree_util.tree_map(jnp.ones_like, params)
  updates, _ = tx.update(grads, tx.init(params), params)
  return updates


def test_each_group_below_learns_at_the_rate_over_factor():
  params = _params(num_layers=3, scan_layers=True)
  groups, top = ulmfit.layer_groups(params)
  got = _sgd_step(ulmfit.discriminative(groups, top, 2.6), params)
  assert float(got["head"]["kernel"][0, 0]) == 1.0
  stack = got["backbone"]["encoder"]["layers"]["block"]["mlp"]["wi"]["kernel"]
  np.testing.assert_allclose(stack[:, 0, 0], [2.6 ** -4, 2.6 ** -3,
                                              2.6 ** -2], rtol=1e-6)
  np.testing.assert_allclose(
      got["backbone"]["embeddings"]["token"]["embedding"][0, 0], 2.6 ** -5,
      rtol=1e-6)


def test_groups_unfreeze_one_at_a_time_from_the_top():
  params = _params(num_layers=2)
  groups, top = ulmfit.layer_groups(params)
  tx = ulmfit.gradual_unfreezing(groups, top, every=3)
  state = tx.init(params)
  grads = jax.tree_util.tree_map(jnp.ones_like, params)
  trained = []
  for _ in range(15):
    updates, state = tx.update(grads, state, params)
    trained.append([bool(updates["head"]["kernel"].any()),
                    bool(updates["backbone"]["pooler"]["kernel"].any()),
                    bool(updates["backbone"]["encoder"]["layer_1"]["mlp"][
                        "wi"]["kernel"].any()),
                    bool(updates["backbone"]["encoder"]["layer_0"]["mlp"][
                        "wi"]["kernel"].any()),
                    bool(updates["backbone"]["embeddings"]["token"][
                        "embedding"].any())])
  # Steps 0-2: the head; 3-5: and the pooler's group; 6-8: and layer 1;
  # 9-11: and layer 0; then the token layer too.
  assert [sum(t) for t in trained] == [1] * 3 + [2] * 3 + [3] * 3 + [4] * 3 \
      + [5] * 3
  assert trained[3][:2] == [True, True] and trained[8][3] is False


@pytest.mark.parametrize("t,want", [(0, 1 / 32), (10, 1.0), (5, None),
                                    (100, 1 / 32)])
def test_slanted_triangular_by_hand(t, want):
  sched = ulmfit.slanted_triangular(1.0, 100, cut_frac=0.1, ratio=32)
  if want is None:  # halfway up: p = 1/2
    want = (1 + 0.5 * 31) / 32
  np.testing.assert_allclose(float(sched(t)), want, rtol=1e-6)
  # Down: p = 1 - (t - cut) / (cut (1/cut_frac - 1)) = 1 - (55 - 10) / 90.
  np.testing.assert_allclose(float(sched(55)), (1 + 0.5 * 31) / 32,
                             rtol=1e-6)


def test_chained_with_adam_a_frozen_group_keeps_zero_moments():
  params = _params(num_layers=2)
  groups, top = ulmfit.layer_groups(params)
  tx = optax.chain(ulmfit.gradual_unfreezing(groups, top, every=100),
                   optax.adam(1e-3), ulmfit.discriminative(groups, top, 2.6))
  updates = _sgd_step(tx, params)
  assert not updates["backbone"]["encoder"]["layer_0"]["mlp"]["wi"][
      "kernel"].any()
  assert updates["head"]["kernel"].all()
