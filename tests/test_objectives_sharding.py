"""Every scheme's gradient step on a data-parallel mesh keeps rows local.

On a mesh that shards the batch's rows, a scheme's corruption, model and
loss should run on each device's own rows: the only collective is the
all-reduce of the gradient and the metric sums. A scatter or gather with
explicit row indices makes XLA's partitioner gather the whole batch onto
every device instead (T5's re-packing once did, and ran slower on two CPU
devices than on one). Schemes that read other rows by design are named
below, with what they read.
"""

import pytest

from tests import lanes
from tests import objective_checks as testing

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
  moved = testing.data_parallel_collectives(obj) - {"all-reduce"}
  assert bool(moved) == (name in ACROSS_ROWS), (
      f"{name} moves rows between devices ({sorted(moved)})"
      if moved else f"{name} is listed in ACROSS_ROWS but reads no other row")
