"""Every size a family lists builds and trains one step.

The quick lane traces one gradient step of every (family, size) with
`jax.eval_shape` (every shape and config check, no FLOPs); the slow lane
runs the step for real on a [2, 32] batch at each family's smallest
released size and compiles the bigger sizes' step ahead of time (no
weights materialised).
"""

import functools
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import objectives
from objectives import common
from configs.compare import family as family_grid
from tests import lanes
from tests import objective_checks as testing
from zoo import models

# The family's own scheme: its paper's (the family grid's choice).
SCHEME = family_grid.FAMILY_SCHEME
SIZES = [(f, s) for f in models.families() for s in models.get(f).SIZES]
SPECIALS = objectives.Specials(vocab_size=8000)


def _scheme(family, size, **model_args):
  """`(obj, batch)`: the family's scheme at `size` and a [2, 32] batch."""
  obj = objectives.build(SCHEME[family], family, size, SPECIALS,
                         model_args=model_args, **testing.corpus_options(
                             SCHEME[family], family, size,
                             SPECIALS.vocab_size, **model_args))
  batch = testing.batch_for(family, seq_len=32, batch_size=2)
  if "tokens" in batch:
    batch["tokens"] = jnp.minimum(batch["tokens"], SPECIALS.last_regular)
  return obj, batch


def _update(obj, batch, params, rng):
  """One SGD step: the updated params and the loss before it."""
  (loss, _), grads = jax.value_and_grad(obj.loss, has_aux=True)(
      params, batch, rng)
  return jax.tree.map(lambda p, g: p - 1e-3 * g, params, grads), loss, grads


def test_every_family_has_a_scheme():
  assert set(SCHEME) >= set(models.families())


def test_families_flagged_for_attention_masks_take_them():
  """`models.takes_attention_mask`: the family's call takes `mask` and
  `positions`, which rank classification's shared-prompt rows need."""
  flagged = [f for f in models.families() if models.takes_attention_mask(f)]
  assert "gpt2" in flagged and "awd_lstm" not in flagged
  for f in flagged:
    params = inspect.signature(models.get(f).Model.__call__).parameters
    assert {"mask", "positions"} <= set(params), f


# The large sizes' traces take seconds each; the slow lane compiles them.
TRACED = [x for x in SIZES if x[1] != "large"]


@pytest.mark.parametrize("family,size", TRACED)
def test_every_size_traces_a_train_step(family, size):
  obj, batch = _scheme(family, size)
  params = jax.eval_shape(obj.init, jax.random.key(0), batch)
  new, loss, _ = jax.eval_shape(functools.partial(_update, obj, batch),
                                params, jax.random.key(1))
  assert loss.shape == () and loss.dtype == jnp.float32
  assert jax.tree.structure(new) == jax.tree.structure(params)
  assert sum(x.size for x in jax.tree.leaves(params)) > 0


def _scanned(family, size):
  """`(obj, batch)` with the layers as one `nn.scan` where the family
  offers it (the same params, stacked): an unrolled large size takes
  minutes to compile on a CPU, a scanned one seconds. ELMo's and
  AWD-LSTM's layers differ from one another, so they never scan; their
  few LSTM layers compile fast unrolled."""
  scans = ("scan_layers" in common.config_fields(family)
           and family not in models.NEVER_SCANNED)
  return _scheme(family, size, **({"scan_layers": True} if scans else {}))


def _split():
  """`(run, compiled)`: each family's smallest released size runs a real
  step; its bigger sizes compile (their random init and step cost up to a
  minute each on a CPU and test nothing more), each beside the size just
  below it."""
  run, compiled = [], []
  for f in models.families():
    sizes = [s for s in models.get(f).SIZES if s != "tiny"]
    run += [(f, sizes[0])] if sizes else []
    compiled += [(f, s, below) for below, s in zip(sizes, sizes[1:])]
  return run, compiled


RUN, COMPILED = _split()


@pytest.mark.slow
@pytest.mark.parametrize("family,size", lanes.sweep(RUN))
def test_smallest_released_size_runs_a_train_step(family, size):
  """Init and the step compile apart (each compiles faster alone)."""
  obj, batch = _scanned(family, size)
  params = jax.jit(obj.init)(jax.random.key(0), batch)
  update = jax.jit(functools.partial(_update, obj, batch))
  new, loss, _ = update(params, jax.random.key(1))
  assert np.isfinite(float(loss))
  # Most params learn: their gradient after a first step is not zero
  # (word2vec's output table starts at zero, so its input table's
  # gradient appears only then).
  _, _, grads = update(new, jax.random.key(2))
  moving = [bool((g != 0).any()) for g in jax.tree.leaves(grads)]
  assert sum(moving) > len(moving) // 2
  assert all(bool(jnp.isfinite(x).all()) for x in jax.tree.leaves(new))


def _nbytes(tree):
  return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree))


@pytest.mark.slow
@pytest.mark.parametrize("family,size,below", lanes.sweep(COMPILED))
def test_bigger_sizes_compile_a_train_step(family, size, below):
  """XLA compiles the step from abstract params: every shape,
  sharding-free lowering and fusion is checked without materialising the
  weights. The compiled step keeps the params' tree, takes and returns
  at least the params' bytes, and the size holds more than the one below."""
  obj, batch = _scanned(family, size)
  params = jax.eval_shape(obj.init, jax.random.key(0), batch)
  step = jax.jit(functools.partial(_update, obj, batch))
  compiled = step.lower(params, jax.random.key(1)).compile()
  new, loss, _ = compiled.out_info
  assert jax.tree.structure(new) == jax.tree.structure(params)
  assert loss.shape == () and loss.dtype == jnp.float32
  nbytes = _nbytes(params)
  smaller, _ = _scheme(family, below)
  assert nbytes > _nbytes(jax.eval_shape(smaller.init, jax.random.key(0),
                                         batch))
  mem = compiled.memory_analysis()
  if mem is not None:
    assert mem.argument_size_in_bytes >= nbytes
    assert mem.output_size_in_bytes >= nbytes


@pytest.mark.parametrize("family", ["bert", "gpt2", "electra", "unilm"])
def test_large_sizes_default_to_no_attention_dropout(family):
  assert models.make_config(family, "large").attention_dropout_rate == 0.0
  assert models.make_config(family, "base").attention_dropout_rate > 0.0
  kept = models.make_config(family, "large", attention_dropout_rate=0.1)
  assert kept.attention_dropout_rate == 0.1
