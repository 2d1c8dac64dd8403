"""Shared checks of the model-family tests (not a test module).

Every family at `tiny`: named output shapes, logical axes on every param
that the default rules turn into valid partition specs, and a forward on
the 8-device CPU mesh equal to the unsharded one.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from tests.fast_params import fast_params
from zoo import models
from zoo import sharding

MESH = {"data": 2, "fsdp": 2, "tensor": 2}


def tokens(batch=4, length=16, vocab=512, seed=0, pad_tail=3):
  """[B, T] int32 ids >= 7 with the last row right-padded (pad 0)."""
  ids = np.random.RandomState(seed).randint(7, vocab - 100, (batch, length))
  ids[-1, length - pad_tail:] = 0
  return jnp.asarray(ids, jnp.int32)


def tiny_model(family, **overrides):
  """(model, unboxed params, tokens [4, 16]) of a family at `tiny`, without
  dropout; the params are `fast_params`' seeded fill."""
  _, model = models.make(family, "tiny", dropout_rate=0.0,
                         attention_dropout_rate=0.0, **overrides)
  x = tokens()
  return model, nn.meta.unbox(fast_params(model, x))["params"], x


def init(model, *args, **kw):
  """Boxed variables of `model` (jitted init)."""
  rngs = {"params": jax.random.key(0), "dropout": jax.random.key(1)}
  return jax.jit(lambda r, *a: model.init(r, *a, **kw))(rngs, *args)


def check_logical_axes(variables) -> list[str]:
  """Asserts every param is boxed with one name per dim; returns paths."""
  leaves = jax.tree_util.tree_leaves_with_path(
      variables["params"], is_leaf=lambda x: isinstance(x, nn.Partitioned))
  paths = []
  for path, leaf in leaves:
    where = jax.tree_util.keystr(path)
    assert isinstance(leaf, nn.LogicallyPartitioned), f"{where} has no axes"
    assert len(leaf.names) == leaf.value.ndim, where
    spec = sharding.mesh_axes_for(leaf.names, sharding.DEFAULT_RULES)
    assert len(spec) == leaf.value.ndim, where
    paths.append(where)
  return paths


def sharded_equals_unsharded(model, variables, *args, atol=1e-5, **kw):
  """Runs the forward replicated and on the (2, 2, 2) mesh; compares."""
  fwd = lambda v, *a: model.apply(v, *a, **kw)
  plain = jax.jit(fwd)(sharding.unbox(variables), *args)
  mesh = sharding.make_mesh(MESH)
  rules = sharding.DEFAULT_RULES
  shardings = sharding.logical_shardings(variables, mesh, rules)
  params = jax.device_put(sharding.unbox(variables), shardings)
  batch = sharding.batch_sharding(mesh, rules)
  args = [jax.device_put(a, batch) for a in args]
  with sharding.activate(mesh, rules):
    out = jax.jit(fwd)(params, *args)
  emb = jax.tree.leaves(params)[0]
  assert len(emb.sharding.device_set) == 8
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=atol),
               out, plain)
  return plain
