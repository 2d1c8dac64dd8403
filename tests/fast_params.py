"""Random params without running `Model.init` (not a test module).

Initialising a model compiles one random-number kernel per param, which
costs tens of seconds on a busy CPU; shapes come cheaply from
`jax.eval_shape`, and numpy fills them in milliseconds. The values are
random, not the model's own initialisation: fine for tests of structure,
masks and parity, wrong for tests of the init itself.
"""

import zlib

import flax.linen as nn
import jax
import numpy as np


def _fill(path, leaf, seed):
  name = jax.tree_util.keystr(path)
  rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
  shape = leaf.shape
  if not shape:
    return np.ones(shape, np.float32)
  if len(shape) == 1:
    base = 1.0 if name.endswith("'scale']") else 0.0
    return (base + 0.1 * rng.standard_normal(shape)).astype(np.float32)
  std = shape[0] ** -0.5
  return (std * rng.standard_normal(shape)).astype(np.float32)


def fast_params(model: nn.Module, *args, seed: int = 0, **kw):
  """Boxed params shaped like `model.init(key, *args, **kw)`, random."""
  abstract = jax.eval_shape(model.init, jax.random.key(0), *args, **kw)
  is_box = lambda x: isinstance(x, nn.meta.AxisMetadata)

  def one(path, leaf):
    if is_box(leaf):
      return leaf.replace_boxed(_fill(path, leaf.value, seed))
    return _fill(path, leaf, seed)

  return jax.tree_util.tree_map_with_path(one, abstract, is_leaf=is_box)
