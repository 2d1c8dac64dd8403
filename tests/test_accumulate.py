"""Gradient accumulation equals one big batch for every registered scheme."""

import jax
import numpy as np
import pytest

from tests import lanes
from tests import objective_checks as testing
from zoo import sharding
from zoo import train_lib

pytestmark = pytest.mark.slow  # minutes of training runs: not the quick lane

SCHEMES = testing.package_schemes()


def _mesh():
  devices = np.array(jax.devices()[:1]).reshape(1, 1, 1)
  return jax.sharding.Mesh(devices, sharding.MESH_AXES)


@pytest.mark.parametrize("name", lanes.sweep(SCHEMES,
                                            family=testing.sweep_family))
def test_two_microbatches_equal_one_big_batch(name):
  """Corruption, scoring and in-batch choices (sentence-pair negatives,
  contrastive neighbours, ELECTRA's samples) are the big batch's."""
  obj = testing.build_for_sweep(name)
  batch = testing.batch_for(obj.family, seq_len=32, batch_size=8)
  params = obj.init(jax.random.key(0), batch)
  rng = jax.random.key(3)

  def run(micro):
    fn = lambda p, b: train_lib.accumulated_grads(
        obj, p, b, rng, micro, _mesh(), sharding.DEFAULT_RULES)
    return jax.jit(fn)(params, batch)

  big, small = run(1), run(2)
  np.testing.assert_allclose(small[1], big[1], rtol=1e-5, atol=1e-6)
  for key in big[2]:
    np.testing.assert_allclose(small[2][key], big[2][key], rtol=1e-5,
                               atol=1e-4, err_msg=key)
  flat_big = jax.tree_util.tree_leaves_with_path(big[0])
  flat_small = dict(jax.tree_util.tree_leaves_with_path(small[0]))
  for path, g in flat_big:
    np.testing.assert_allclose(np.asarray(flat_small[path]), np.asarray(g),
                               rtol=1e-4, atol=1e-6,
                               err_msg=jax.tree_util.keystr(path))
