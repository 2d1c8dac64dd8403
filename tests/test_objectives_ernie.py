"""objectives.ernie: entity noise, dEA by hand, and the scheme learning."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from objectives import ernie
from tests import objective_checks as testing


def test_alignment_noise_rates():
  ids = jnp.where(jnp.arange(200_000) % 2 == 0, 7, 0).reshape(400, 500)
  noisy = np.asarray(ernie.noisy_entities(jax.random.key(0), ids, 1000,
                                          0.05, 0.15))
  linked = np.asarray(ids) > 0
  assert not noisy[~linked].any()  # never a new alignment
  kept, dropped = noisy[linked] == 7, noisy[linked] == 0
  replaced = ~kept & ~dropped
  assert abs(dropped.mean() - 0.15) < 0.005
  # A random draw of 7 itself counts as kept: 5% x 999/1000 replaced.
  assert abs(replaced.mean() - 0.05 * 0.999) < 0.003
  assert noisy.max() <= 1000


def test_first_mentions_by_hand():
  ids = jnp.asarray([[0, 5, 3, 5, 0, 3, 9]])
  first, target = ernie.first_mentions(ids)
  np.testing.assert_array_equal(first[0], [0, 1, 1, 0, 0, 0, 1])
  np.testing.assert_array_equal(np.asarray(target[0])[[1, 2, 3, 5, 6]],
                                [1, 2, 1, 2, 6])


def test_dea_loss_by_hand():
  table = jnp.asarray([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]])
  ids = jnp.asarray([[1, 2, 0, 1]])
  queries = jnp.asarray([[[1.0, 1.0], [0.0, 1.0], [9.0, 9.0], [0.0, 1.0]]])
  got = ernie.dea_sums(queries, table, ids)
  # Candidates: entity 1 (row [1, 0]) at 0, entity 2 (row [0, 2]) at 1.
  # Position 0 wants entity 1: logits (1, 2); 1 wants 2: (0, 2), right;
  # 3 wants 1: (0, 2). Position 2 has no entity.
  lse = lambda a, b: np.log(np.exp(a) + np.exp(b))
  want = (lse(1, 2) - 1) + (lse(0, 2) - 2) + (lse(0, 2) - 0)
  np.testing.assert_allclose(got["loss_sum"], want, rtol=1e-6)
  assert float(got["weight_sum"]) == 3 and float(got["correct_sum"]) == 1


def _batch():
  batch = testing.tiny_batch(seq_len=32, batch_size=4)
  rng = np.random.default_rng(0)
  words = np.asarray(batch["word_ids"])
  starts = np.concatenate([np.ones((4, 1), bool), words[:, 1:] != words[:, :-1]],
                          1) & (np.asarray(batch["tokens"]) > 0)
  ids = np.where(starts & (rng.random(words.shape) < 0.4),
                 rng.integers(1, 51, words.shape), 0)
  return dict(batch, entity_ids=jnp.asarray(ids, jnp.int32))


def test_scheme_learns_a_fixed_batch_and_keeps_its_table():
  obj = testing.build("ernie", "ernie", num_entities=50,
                      entity_vectors="random")
  batch = _batch()
  out = testing.check(obj, batch, steps=40, lr=1e-2, uniform=False)
  assert out["metrics"]["dea_weight_sum"] > 0
  params = obj.init(jax.random.key(0), batch)
  _, grads = jax.value_and_grad(obj.loss, has_aux=True)(
      jax.tree_util.tree_map(lambda x: x, testing.common.nn.meta.unbox(
          params)), batch, jax.random.key(1), True)
  assert not np.asarray(grads["entities"]).any()  # never trained
  assert np.abs(np.asarray(grads["dea"]["kernel"])).max() > 0


def test_scheme_needs_its_family():
  with pytest.raises(ValueError, match="needs the ernie family"):
    testing.build("ernie", "bert", num_entities=5)
