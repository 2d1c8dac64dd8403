"""Attention-head pruning: gate gradients, importance, physical removal."""

import dataclasses
import functools
import os
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from fast_params import fast_params  # pylint: disable=wrong-import-position

from zoo import models  # pylint: disable=wrong-import-position
from zoo.compress import heads  # pylint: disable=wrong-import-position
from zoo.models import blocks  # pylint: disable=wrong-import-position

TOKENS = np.random.default_rng(0).integers(1, 500, (2, 12)).astype(np.int32)
TOKENS[1, 9:] = 0  # padding: the mask path is exercised too


def _model(family, scan):
  config = models.make_config(family, "tiny", scan_layers=scan)
  params = nn.meta.unbox(fast_params(models.get(family).Model(config),
                                     TOKENS))["params"]
  return config, params


def _hidden(family, config, params):
  out = models.get(family).Model(config).apply(
      {"params": params}, TOKENS, return_logits=False)
  return np.asarray(out["hidden"])


@functools.cache
def _loss(family, config):
  model = models.get(family).Model(config)
  return lambda p, tokens: jnp.mean(jnp.square(model.apply(
      {"params": p}, tokens, return_logits=False)["hidden"]))


@pytest.mark.parametrize("scan", [False, True])
def test_gate_gradient_is_the_gradient_of_a_head_gate(scan):
  config, params = _model("bert", scan)
  loss = _loss("bert", config)
  paths = heads.find_attention(params)
  assert len(paths) == (1 if scan else 2)
  got = jax.jit(lambda p: heads.gate_grads(p, jax.grad(loss)(p, TOKENS)))(
      params)

  def gated(xi):  # each head's output scaled by xi, built the slow way
    p = params
    for path in paths:
      module = heads._get(p, path)  # pylint: disable=protected-access
      w = module["out"]["kernel"] * xi[path][..., None, None]
      p = heads._replace(p, path, {  # pylint: disable=protected-access
          **module, "out": dict(module["out"], kernel=w)})
    return loss(p, TOKENS)
  ones = {path: jnp.ones(v.shape) for path, v in got.items()}
  want = jax.jit(jax.grad(gated))(ones)
  for path in paths:
    assert got[path].shape == ((2, 4) if scan else (4,))
    np.testing.assert_allclose(got[path], want[path], rtol=1e-4, atol=1e-7)
    assert np.all(np.abs(np.asarray(got[path])) > 0)


def test_importance_sums_batches_then_normalises_each_layer():
  config, params = _model("bert", False)
  loss = _loss("bert", config)
  batches = [TOKENS[:1], TOKENS[1:]]
  raw = heads.head_importance(loss, params, batches, normalised=False)
  per = heads.head_importance(loss, params, batches, per_batch_abs=True,
                              normalised=False)
  step = heads._gate_step(loss)  # pylint: disable=protected-access
  one = [step(params, b) for b in batches]  # signed dL/dxi of each batch
  for path, s in raw.items():
    a, b = np.asarray(one[0][path]), np.asarray(one[1][path])
    np.testing.assert_allclose(s, np.abs(a + b), rtol=1e-5)
    np.testing.assert_allclose(per[path], np.abs(a) + np.abs(b), rtol=1e-5)
  norm = heads.normalise(raw)
  for path, s in norm.items():
    assert np.linalg.norm(s) == pytest.approx(1.0, rel=1e-5)
    np.testing.assert_allclose(s * np.linalg.norm(raw[path]), raw[path],
                               rtol=1e-5)


def test_keep_top_keeps_each_layers_best_in_order():
  scores = {("a",): np.array([0.1, 0.9, 0.5, 0.7]),
            ("b",): np.array([[4.0, 3, 2, 1], [1, 2, 3, 4]])}
  kept = heads.keep_top(scores, 2)
  np.testing.assert_array_equal(kept[("a",)], [1, 3])
  np.testing.assert_array_equal(kept[("b",)], [[0, 1], [2, 3]])


CASES = [("bert", False), ("bert", True), ("roberta", False),
         ("electra", True)]


@pytest.mark.parametrize("family, scan", CASES)
def test_removed_heads_equal_zeroed_heads_and_all_kept_is_bitwise(family,
                                                                  scan):
  config, params = _model(family, scan)
  full = _hidden(family, config, params)
  rng = np.random.default_rng(1)
  scores = {p: rng.random(heads._get(params, p)["out"]["kernel"].shape[:-2])  # pylint: disable=protected-access
            for p in heads.find_attention(params)}
  same, same_config, _ = heads.prune_heads(params, config, scores, 0)
  np.testing.assert_array_equal(_hidden(family, same_config, same), full)

  small, small_config, kept = heads.prune_heads(params, config, scores, 2)
  assert small_config.num_heads == 2
  assert small_config.block().head_dim == config.block().head_dim == 16
  for path in heads.find_attention(small):
    module = heads._get(small, path)  # pylint: disable=protected-access
    lead = (2,) if scan else ()
    assert module["query"]["kernel"].shape == lead + (64, 2, 16)
    assert module["value"]["bias"].shape == lead + (2, 16)
    assert module["out"]["kernel"].shape == lead + (2, 16, 64)
  removed = 2 * 3 * 64 * 16 + 2 * 3 * 16 + 2 * 16 * 64  # per layer
  assert heads.count_params(small) == heads.count_params(params) - 2 * removed
  got = _hidden(family, small_config, small)
  want = _hidden(family, config, heads.zero_heads(params, kept))
  np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
  assert np.abs(want - full).max() > 1e-2  # the heads did matter


def test_bad_settings_are_named():
  config, params = _model("bert", False)
  scores = {p: np.ones(4) for p in heads.find_attention(params)}
  with pytest.raises(ValueError, match="cannot remove 5 of 4 heads"):
    heads.prune_heads(params, config, scores, 5)
  with pytest.raises(ValueError, match="cannot remove 4 of 4 heads"):
    heads.prune_heads(params, config, scores, 4)
  with pytest.raises(ValueError, match="cannot remove -1 of 4"):
    heads.prune_heads(params, config, scores, -1)
  with pytest.raises(ValueError, match="the config 8"):
    heads.prune_heads(params, dataclasses.replace(config, num_heads=8),
                      scores, 1)
  with pytest.raises(ValueError, match="no scores for the attention"):
    heads.prune_heads(params, config, dict(list(scores.items())[:1]), 1)
  with pytest.raises(ValueError, match="at least one batch"):
    heads.head_importance(_loss("bert", config), params, [])
  with pytest.raises(ValueError, match="one head count, found none"):
    heads.num_heads_of({"dense": {"kernel": np.ones((2, 2))}})



@pytest.mark.parametrize("scan", [False, True])
def test_a_head_pruned_model_saves_as_a_workdir_that_loads(tok, tmp_path,
                                                           scan):
  import zoo  # pylint: disable=import-outside-toplevel
  from zoo.convert import workdir as workdir_lib  # pylint: disable=import-outside-toplevel
  config, params = _model("bert", scan)
  config = dataclasses.replace(config, vocab_size=tok.vocab_size)
  params = nn.meta.unbox(fast_params(models.get("bert").Model(config),
                                     TOKENS))["params"]
  scores = {p: np.arange(4.0) for p in heads.find_attention(params)}
  small, small_config, _ = heads.prune_heads(params, config, scores, 2)
  workdir_lib.model_to_workdir("bert", small_config, small, tok,
                               tmp_path / "pruned")
  loaded = zoo.load(str(tmp_path / "pruned"))
  assert loaded.config.num_heads == 2 and loaded.config.head_dim == 16
  # The same weights, bitwise (a workdir loads unrolled whatever the
  # layout it was given), and so the same network: up to the rounding
  # between a scanned and an unrolled stack (`test_layers`' 1e-5).
  jax.tree.map(np.testing.assert_array_equal,
               blocks.unstack(loaded.params),
               {k: v for k, v in blocks.unstack(small).items()
                if k in loaded.params})
  np.testing.assert_allclose(
      _hidden("bert", loaded.config, loaded.params),
      _hidden("bert", small_config, small), atol=1e-6 if not scan else 1e-5)
