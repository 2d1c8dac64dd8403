"""Mesh construction, logical rules and the sharding errors."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from zoo import sharding

MESH_222 = {"data": 2, "fsdp": 2, "tensor": 2}


class _Tiny(nn.Module):
  """Embedding `[V, D]` and a dense `[D, F]` with logical axes."""
  vocab: int = 16
  embed: int = 8
  mlp: int = 12

  @nn.compact
  def __call__(self, tokens):
    table = self.param(
        "table", nn.with_logical_partitioning(
            nn.initializers.normal(), ("vocab", "embed")),
        (self.vocab, self.embed))
    x = table[tokens]
    x = nn.with_logical_constraint(x, ("batch", "length", "embed"))
    kernel = self.param(
        "kernel", nn.with_logical_partitioning(
            nn.initializers.normal(), ("embed", "mlp")),
        (self.embed, self.mlp))
    return x @ kernel


def _abstract(module):
  return jax.eval_shape(module.init, jax.random.key(0),
                        jnp.zeros((4, 3), jnp.int32))


def test_make_mesh_minus_one_takes_the_rest():
  mesh = sharding.make_mesh({"data": -1, "fsdp": 2, "tensor": 1})
  assert dict(mesh.shape) == {"data": 4, "fsdp": 2, "tensor": 1}
  assert mesh.axis_types == (jax.sharding.AxisType.Auto,) * 3
  assert sharding.make_mesh({"tensor": 8}).shape["data"] == 1


@pytest.mark.parametrize("cfg,words", [
    ({"data": 3, "fsdp": 1, "tensor": 1}, "has 3 devices but there are 8"),
    ({"data": -1, "fsdp": 3}, "does not divide 8"),
    ({"data": -1, "fsdp": -1}, "more than one axis of size -1"),
    ({"model": 8}, "unknown axes ['model']"),
])
def test_make_mesh_errors(cfg, words):
  with pytest.raises(ValueError) as err:
    sharding.make_mesh(cfg)
  assert words in str(err.value)


def test_rules_cover_the_logical_names():
  names = dict(sharding.DEFAULT_RULES)
  for name in ("batch", "length", "embed", "vocab", "heads", "kv", "mlp",
               "layers", "positions", "relpos_buckets", "lstm", "char_vocab",
               "adapter", "classes"):
    assert name in names
  assert sharding.check_rules(sharding.DEFAULT_RULES) == sharding.DEFAULT_RULES


def test_check_rules_normalizes_json_lists():
  rules = sharding.check_rules([["batch", ["data", "fsdp"]], ["embed", None]])
  assert rules == (("batch", ("data", "fsdp")), ("embed", None))


@pytest.mark.parametrize("rules,words", [
    ([("embed", "fsdp"), ("embed", "tensor")], "logical axis 'embed' twice"),
    ([("embed", "model")], "names mesh axis 'model'"),
    ([("embed",)], "is not a (logical_name, mesh_axes) pair"),
    ([("embed", ("data", "data"))], "lists a mesh axis twice"),
    ([("embed", 3)], "is not a mesh axis name"),
])
def test_check_rules_errors(rules, words):
  with pytest.raises(ValueError) as err:
    sharding.check_rules(rules)
  assert words in str(err.value)


def test_logical_shardings_follow_rules():
  mesh = sharding.make_mesh(MESH_222)
  tree = _abstract(_Tiny())
  shard = sharding.logical_shardings(tree, mesh, sharding.DEFAULT_RULES)
  assert shard["params"]["table"].spec == P("tensor", "fsdp")
  assert shard["params"]["kernel"].spec == P("fsdp", "tensor")
  rules = [("embed", "data"), ("mlp", ("fsdp", "tensor"))]
  shard = sharding.logical_shardings(tree, mesh, rules)
  assert shard["params"]["table"].spec == P(None, "data")
  assert shard["params"]["kernel"].spec == P("data", ("fsdp", "tensor"))


def test_unknown_names_and_unboxed_leaves_replicate():
  mesh = sharding.make_mesh(MESH_222)
  tree = {"a": nn.LogicallyPartitioned(jax.ShapeDtypeStruct((4, 6), jnp.float32),
                                       ("no_such_axis", "embed")),
          "count": jax.ShapeDtypeStruct((), jnp.int32)}
  shard = sharding.logical_shardings(tree, mesh, sharding.DEFAULT_RULES)
  assert shard["a"].spec == P(None, "fsdp")
  assert shard["count"].spec == P()


def test_repeated_logical_name_shards_first_occurrence_only():
  spec = sharding.mesh_axes_for(("embed", "embed"), sharding.DEFAULT_RULES)
  assert spec == P("fsdp", None)


def test_two_logical_axes_on_one_mesh_axis_is_an_error():
  mesh = sharding.make_mesh(MESH_222)
  rules = [("vocab", "tensor"), ("embed", "tensor")]
  with pytest.raises(ValueError) as err:
    sharding.logical_shardings(_abstract(_Tiny()), mesh, rules)
  msg = str(err.value)
  assert "params/table" in msg
  assert "logical axes 'vocab' and 'embed'" in msg
  assert "same mesh axis 'tensor'" in msg


def test_indivisible_dimension_is_an_error():
  mesh = sharding.make_mesh(MESH_222)
  with pytest.raises(ValueError) as err:
    sharding.logical_shardings(_abstract(_Tiny(mlp=7)), mesh,
                               sharding.DEFAULT_RULES)
  msg = str(err.value)
  assert "params/kernel: dimension 1 ('mlp', size 7)" in msg
  assert "not divisible by mesh axis tensor of size 2" in msg


def test_sharded_init_and_activation_constraints():
  mesh = sharding.make_mesh(MESH_222)
  module = _Tiny()
  tokens = jnp.arange(12, dtype=jnp.int32).reshape(4, 3) % 16
  shard = sharding.logical_shardings(_abstract(module), mesh,
                                     sharding.DEFAULT_RULES)
  init = jax.jit(lambda r: sharding.unbox(module.init(r, tokens)),
                 out_shardings=shard)
  with sharding.activate(mesh, sharding.DEFAULT_RULES):
    params = init(jax.random.key(0))
    out = jax.jit(module.apply)(params, tokens)
    inside = str(jax.make_jaxpr(module.apply)(params, tokens))
  outside = str(jax.make_jaxpr(module.apply)(params, tokens))
  assert "sharding_constraint" in inside
  assert "sharding_constraint" not in outside
  assert params["params"]["kernel"].sharding.spec == P("fsdp", "tensor")
  expect = module.apply(jax.device_get(params), np.asarray(tokens))
  # Sharded sums may add in another order.
  np.testing.assert_allclose(out, expect, rtol=1e-5, atol=1e-8)
  assert sharding.batch_divisor(mesh, sharding.DEFAULT_RULES) == 4
  assert sharding.batch_sharding(mesh, sharding.DEFAULT_RULES).spec == P(
      ("data", "fsdp"), None)


class _Device:
  def __init__(self, index, process):
    self.id, self.process_index = index, process


def _mesh_of(processes, shape):
  """A stand-in mesh: `.devices` with process indices, `.axis_names`."""
  devices = np.array([_Device(i, p) for i, p in enumerate(processes)],
                     dtype=object).reshape(shape)
  return type("Mesh", (), {"devices": devices,
                           "axis_names": sharding.MESH_AXES})()


def test_batch_shards_held_by_two_processes_are_found():
  rules = sharding.DEFAULT_RULES
  # 2 processes x 4 devices, tensor pairs inside a process: fine.
  assert not sharding.shared_batch_shards(
      _mesh_of([0, 0, 0, 0, 1, 1, 1, 1], (2, 2, 2)), rules)
  # tensor = 8 spans both processes: the one batch shard is shared.
  assert sharding.shared_batch_shards(
      _mesh_of([0, 0, 0, 0, 1, 1, 1, 1], (1, 1, 8)), rules) == [(0, [0, 1])]
  # data = 2 across, tensor = 4 inside each process: fine.
  assert not sharding.shared_batch_shards(
      _mesh_of([0, 0, 0, 0, 1, 1, 1, 1], (2, 1, 4)), rules)


def test_one_process_feeds_every_batch_row_in_order():
  mesh = sharding.make_mesh(MESH_222)
  assert sharding.process_rows(mesh, sharding.DEFAULT_RULES, 16) == list(
      range(16))


def _local_sizes(x, h):
  """Each element: the batch and head sizes of the slice its device got."""
  sizes = jnp.array([x.shape[0], x.shape[2]], jnp.float32)
  return jnp.broadcast_to(sizes, x.shape[:3] + (2,)) + 0 * h.sum()


@pytest.mark.parametrize("cfg, rows, want", [
    (MESH_222, 8, (2, 2)),  # batch over data x fsdp, heads over tensor
    (MESH_222, 6, (6, 2)),  # 6 rows do not split 4 ways: kept whole
    ({"data": 1}, 8, (8, 4)),  # one device: the function itself
])
def test_per_device_splits_rows_and_heads_as_the_rules_say(cfg, rows, want):
  mesh = sharding.make_mesh(cfg, jax.devices()[:8 if len(cfg) > 1 else 1])
  x = jnp.zeros((rows, 5, 4, 3))
  h = jnp.zeros((4,))
  names = (("batch", None, "heads", None), ("heads",))
  out_names = ("batch", None, "heads", None)
  run = jax.jit(lambda x, h: sharding.per_device(_local_sizes, (x, h), names,
                                                 out_names))
  with sharding.activate(mesh, sharding.DEFAULT_RULES):
    out = run(x, h)
  assert out.shape == (rows, 5, 4, 2)
  np.testing.assert_array_equal(out[..., 0], want[0])
  np.testing.assert_array_equal(out[..., 1], want[1])
  # Outside a mesh the function sees the whole arrays.
  np.testing.assert_array_equal(run(x, h)[..., 0], rows)
