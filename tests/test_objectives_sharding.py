"""Every scheme's gradient step on a data-parallel mesh keeps rows local.

On a mesh that shards the batch's rows, a scheme's corruption, model and
loss should run on each device's own rows: the only collective is the
all-reduce of the gradient and the metric sums. A scatter or gather with
explicit row indices makes XLA's partitioner gather the whole batch onto
every device instead (T5's re-packing once did, and ran slower on two CPU
devices than on one). Schemes that read other rows by design are named
below, with what they read.
"""

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tests import lanes
from tests import objective_checks as testing
from zoo import sharding
from zoo import train_lib
from zoo.plan import hlo

pytestmark = pytest.mark.slow  # a compile per scheme: not the quick lane

SCHEMES = testing.package_schemes()

# Scheme -> the other rows it reads, by its definition.
ACROSS_ROWS = {
    "nsp": "the random second segment, from another row's document",
    "structbert": "the random second segment, from another row's document",
    "quick_thought": "every other row's sentence is a candidate",
}


@pytest.mark.parametrize("name", lanes.sweep(SCHEMES,
                                            family=testing.sweep_family))
def test_a_data_parallel_step_moves_no_rows(name):
  obj = testing.build_for_sweep(name)
  mesh = sharding.make_mesh({"data": -1})
  batch = testing.batch_for(obj.family, seq_len=32,
                            batch_size=len(jax.devices()))
  params = obj.init(jax.random.key(0), batch)
  rows = jax.tree.map(
      lambda x: NamedSharding(mesh, P("data", *[None] * (np.ndim(x) - 1))),
      batch)
  step = jax.jit(lambda p, b: train_lib.accumulated_grads(
      obj, p, b, jax.random.key(3), 1, mesh, sharding.DEFAULT_RULES),
                 in_shardings=(None, rows))
  with sharding.activate(mesh, sharding.DEFAULT_RULES):
    compiled = step.lower(params, batch).compile()
  moved = set(hlo.collectives(compiled.as_text())) - {"all-reduce"}
  assert bool(moved) == (name in ACROSS_ROWS), (
      f"{name} moves rows between devices ({sorted(moved)})"
      if moved else f"{name} is listed in ACROSS_ROWS but reads no other row")
