"""Heads: pooling, LM, classification, tags, span QA, scalar mix, masks."""

import itertools

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from zoo import sharding
from zoo.models import heads

B, T, D = 3, 6, 8
LENGTHS = np.array([6, 4, 2])
MASK = jnp.asarray(np.arange(T)[None] < LENGTHS[:, None])


def _hidden(seed=0):
  return jax.random.normal(jax.random.key(seed), (B, T, D))


def _scramble_padding(hidden, seed=9):
  """The same states with different values on padded positions."""
  noise = 100.0 * jax.random.normal(jax.random.key(seed), hidden.shape)
  return jnp.where(MASK[..., None], hidden, noise)


def _run(module, *args, **kw):
  params = module.init(jax.random.key(1), *args, **kw)
  return params, module.apply(params, *args, **kw)


def test_pool_mean_ignores_padding_and_cls_takes_first():
  h = _hidden()
  mean = heads.pool(h, MASK, "mean")
  for b, n in enumerate(LENGTHS):
    np.testing.assert_allclose(mean[b], h[b, :n].mean(0), rtol=1e-5)
  np.testing.assert_array_equal(heads.pool(h, MASK, "cls"), h[:, 0])
  last = heads.pool(h, MASK, "last")
  for b, n in enumerate(LENGTHS):
    np.testing.assert_array_equal(last[b], h[b, n - 1])
  with pytest.raises(ValueError, match="unknown pooling 'sum'"):
    heads.pool(h, MASK, "sum")
  with pytest.raises(ValueError, match="mask shape"):
    heads.pool(h, MASK[:, :3], "mean")


def test_concat_pool_is_last_max_and_mean_of_real_tokens():
  h = _hidden()
  got = heads.pool(h, MASK, "concat")
  chex.assert_shape(got, (B, 3 * D))
  for b, n in enumerate(LENGTHS):
    want = np.concatenate([h[b, n - 1], h[b, :n].max(0), h[b, :n].mean(0)])
    np.testing.assert_allclose(got[b], want, rtol=1e-5, atol=1e-6)
  empty = jnp.zeros((1, T), bool)
  assert np.all(np.asarray(heads.pool(h[:1], empty, "max")) == 0)


def test_ulmfit_classifier_reads_real_tokens_only():
  head = heads.ConcatPoolClassifier(5, hidden_dim=7)
  h = _hidden()
  params, logits = _run(head, h, MASK)
  chex.assert_shape(logits, (B, 5))
  assert nn.meta.unbox(params)["params"]["dense_0"]["kernel"].shape == (
      3 * D, 7)
  other = head.apply(params, _scramble_padding(h), MASK)
  np.testing.assert_allclose(logits, other, atol=1e-5)
  dropped = head.apply(params, h, MASK, deterministic=False,
                       rngs={"dropout": jax.random.key(3)})
  assert np.abs(dropped - logits).max() > 1e-4


@pytest.mark.parametrize("pool", ["cls", "last", "mean"])
def test_sequence_classifier_shapes_and_padding(pool):
  head = heads.SequenceClassifier(5, pool=pool, pre_dense=True)
  h = _hidden()
  params, logits = _run(head, h, MASK)
  chex.assert_shape(logits, (B, 5))
  other = head.apply(params, _scramble_padding(h), MASK)
  np.testing.assert_allclose(logits, other, atol=1e-5)


def test_classifier_dropout_needs_rng_and_changes_output():
  head = heads.SequenceClassifier(4, dropout_rate=0.5)
  params, logits = _run(head, _hidden(), MASK)
  dropped = head.apply(params, _hidden(), MASK, deterministic=False,
                       rngs={"dropout": jax.random.key(3)})
  assert np.abs(dropped - logits).max() > 1e-4


def test_regressor_shapes():
  _, out = _run(heads.Regressor(pool="mean"), _hidden(), MASK)
  chex.assert_shape(out, (B,))
  _, out = _run(heads.Regressor(num_outputs=2), _hidden(), MASK)
  chex.assert_shape(out, (B, 2))


@pytest.mark.parametrize("kind", ["linear", "bilstm"])
def test_tagger_padding_never_reaches_real_tokens(kind):
  head = heads.TokenTagger(7, kind=kind, lstm_dim=5)
  h = _hidden()
  params, logits = _run(head, h, MASK)
  chex.assert_shape(logits, (B, T, 7))
  other = head.apply(params, _scramble_padding(h), MASK)
  real = np.asarray(MASK)
  np.testing.assert_allclose(np.asarray(logits)[real], np.asarray(other)[real],
                             atol=1e-5)


def test_bilstm_tagger_sees_both_sides():
  head = heads.TokenTagger(7, kind="bilstm", lstm_dim=5)
  h = _hidden()
  params, logits = _run(head, h, MASK)
  moved = head.apply(params, h.at[0, 3].add(1.0), MASK)
  # Position 3 of row 0 changed: positions before and after it both move.
  assert np.abs(moved[0, 0] - logits[0, 0]).max() > 1e-5
  assert np.abs(moved[0, 5] - logits[0, 5]).max() > 1e-5
  with pytest.raises(ValueError, match="unknown tagger kind"):
    _run(heads.TokenTagger(7, kind="crf"), h, MASK)


def test_span_qa_scores_and_masking():
  h = _hidden()
  params, out = _run(heads.SpanQA(), h, MASK)
  start = nn.meta.unbox(params["params"]["start"])
  np.testing.assert_allclose(np.asarray(out["start_logits"])[np.asarray(MASK)],
                             np.asarray(h @ start)[np.asarray(MASK)],
                             rtol=1e-5, atol=1e-6)
  for name in ("start", "end"):
    probs = jnp.exp(out[f"{name}_log_probs"])
    np.testing.assert_allclose(probs.sum(-1), np.ones(B), rtol=1e-5)
    assert float(jnp.where(MASK, 0.0, probs).max()) < 1e-6


def test_best_span_matches_brute_force():
  s = jax.random.normal(jax.random.key(4), (B, T))
  e = jax.random.normal(jax.random.key(5), (B, T))
  start, end = heads.best_span(s, e, max_length=3)
  for b in range(B):
    pairs = [(i, j) for i, j in itertools.product(range(T), range(T))
             if i <= j < i + 3]
    want = max(pairs, key=lambda p: float(s[b, p[0]] + e[b, p[1]]))
    assert (int(start[b]), int(end[b])) == want


def test_scalar_mix_weights_and_gamma():
  layers = [_hidden(i) for i in range(3)]
  mix = heads.ScalarMix(3)
  params, out = _run(mix, layers)
  np.testing.assert_allclose(out, sum(layers) / 3, atol=1e-5)
  params = jax.tree.map(lambda x: x, nn.meta.unbox(params))
  params["params"]["weights"] = jnp.array([0.0, 1.0, 2.0])
  params["params"]["gamma"] = jnp.array(2.0)
  s = jax.nn.softmax(jnp.array([0.0, 1.0, 2.0]))
  want = 2.0 * sum(w * h for w, h in zip(s, layers))
  np.testing.assert_allclose(mix.apply(params, layers), want, atol=1e-5)
  with pytest.raises(ValueError, match="built for 3 layers got 2"):
    mix.apply(params, layers[:2])


def test_scalar_mix_layer_norm_uses_real_tokens_only():
  layers = [3.0 + 5.0 * _hidden(i) for i in range(2)]
  mix = heads.ScalarMix(2, layer_norm=True)
  params = nn.meta.unbox(mix.init(jax.random.key(1), layers, MASK))
  params["params"]["weights"] = jnp.array([40.0, 0.0])  # layer 0 alone
  out = mix.apply(params, layers, MASK)
  real = np.asarray(out)[np.asarray(MASK)]
  assert abs(real.mean()) < 1e-4 and abs(real.var() - 1.0) < 1e-3
  other = mix.apply(params, [_scramble_padding(h) for h in layers], MASK)
  np.testing.assert_allclose(np.asarray(other)[np.asarray(MASK)], real,
                             atol=1e-4)


def test_adapter_mask_selects_adapters_and_head():
  params = {"params": {
      "backbone": {"layer_0": {"attn": {"kernel": 1.0},
                               "adapter_attn": {"down": {"kernel": 2.0}}}},
      "head": {"out": {"kernel": 3.0}}}}
  mask = heads.adapter_mask(params)
  assert mask["params"]["backbone"]["layer_0"]["adapter_attn"]["down"][
      "kernel"] is True
  assert mask["params"]["backbone"]["layer_0"]["attn"]["kernel"] is False
  assert mask["params"]["head"]["out"]["kernel"] is True
  no_head = heads.adapter_mask(params, train_head=False)
  assert no_head["params"]["head"]["out"]["kernel"] is False


def test_adapter_mask_on_boxed_params_mirrors_unboxed_tree():
  params = heads.SequenceClassifier(2).init(jax.random.key(0), _hidden())
  mask = heads.adapter_mask({"head": params})
  unboxed = nn.meta.unbox({"head": params})
  assert jax.tree.structure(mask) == jax.tree.structure(unboxed)
  assert all(jax.tree.leaves(mask))
  assert not any(jax.tree.leaves(heads.adapter_mask(params, False)))


def test_every_head_param_has_valid_logical_axes():
  h = _hidden()
  mods = [(heads.SequenceClassifier(4, pre_dense=True), (h, MASK)),
          (heads.ConcatPoolClassifier(4), (h, MASK)),
          (heads.TokenTagger(4, "bilstm", 4), (h, MASK)),
          (heads.SpanQA(), (h, MASK)), (heads.ScalarMix(2), ([h, h],))]
  mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  for mod, args in mods:
    abstract = jax.eval_shape(mod.init, jax.random.key(0), *args)
    leaves = jax.tree.leaves(abstract, is_leaf=lambda x: isinstance(
        x, nn.LogicallyPartitioned))
    assert all(isinstance(x, nn.LogicallyPartitioned) for x in leaves), mod
    sharding.logical_shardings(abstract, mesh, sharding.DEFAULT_RULES)


def test_moments_standardise_features_and_leave_constant_ones_at_zero():
  x = np.array([[1.0, 5.0, 2.0], [3.0, 5.0, 4.0], [5.0, 5.0, 9.0]],
               np.float32)
  mean, std = heads.moments(x)
  np.testing.assert_allclose(mean, [3.0, 5.0, 5.0], rtol=1e-6)
  np.testing.assert_allclose(std, [np.std([1, 3, 5]), 1.0,
                                   np.std([2, 4, 9])], rtol=1e-6)
  layer = heads.Standardize()
  params = layer.init(jax.random.key(0), x)["params"]
  np.testing.assert_array_equal(layer.apply({"params": params}, x), x)
  params = {"mean": mean, "scale": 1 / std}
  z = np.asarray(layer.apply({"params": params}, x))
  np.testing.assert_allclose(z.mean(0), 0, atol=1e-6)
  np.testing.assert_allclose(z.std(0), [1, 0, 1], atol=1e-6)
