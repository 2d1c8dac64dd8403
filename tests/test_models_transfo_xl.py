"""Transformer-XL at tiny, by invariants (transformers ships it no more):
segment memory equals attention over the concatenation, no gradient into
the memory, causality, packing, clm training, the model face."""

import dataclasses

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from objectives import transforms
from tests import model_checks as mc
from tests import objective_checks as oc
from tests.fast_params import fast_params
from zoo import models
from zoo.models import blocks

T = 8  # segment length; tiny's mem_len (64) holds three segments


@pytest.fixture(scope="module")
def tiny():
  config, model = models.make("transfo_xl", "tiny", dropout_rate=0.0)
  x = mc.tokens(batch=2, length=3 * T, pad_tail=0)
  variables = fast_params(model, x)  # unit-scale weights: every term shows
  fwd = jax.jit(lambda v, x, **kw: model.apply(v, x, **kw))
  return config, model, variables, fwd, x


def _segments(x):
  return [x[:, i * T:(i + 1) * T] for i in range(x.shape[1] // T)]


def _chain(fwd, variables, x, **kw):
  """Each segment of x read after the previous one's new_mems."""
  mems, outs = None, []
  for seg in _segments(x):
    outs.append(fwd(variables, seg, mems=mems, **kw))
    mems = outs[-1]["new_mems"]
  return outs


def test_memory_equals_attention_over_the_concatenation(tiny):
  """A layer's input at a position never depends on later ones and only
  distances count, so while the memory holds the whole past, layer l's
  mems (its inputs at the earlier positions) are what one call over all
  segments has there: every layer's states, and the logits, agree."""
  config, _, variables, fwd, x = tiny
  full = fwd(variables, x)
  outs = _chain(fwd, variables, x)
  for i, out in enumerate(outs):
    span = slice(i * T, (i + 1) * T)
    assert len(out["layers"]) == config.num_layers + 1
    for a, b in zip(out["layers"], full["layers"]):
      np.testing.assert_allclose(a, b[:, span], atol=3e-5)
    np.testing.assert_allclose(out["logits"], full["logits"][:, span],
                               atol=3e-5)
  for mem, state in zip(outs[1]["new_mems"], full["layers"]):
    np.testing.assert_allclose(mem, state[:, :2 * T], atol=3e-5)
  # Given positions take the gather path (mems sit at 0 .. M-1 before
  # them): arange gives the same distances.
  pos = jnp.broadcast_to(jnp.arange(T), (2, T))
  moved = fwd(variables, _segments(x)[1], mems=outs[0]["new_mems"],
              positions=pos)
  np.testing.assert_allclose(moved["hidden"], outs[1]["hidden"], atol=3e-5)
  # Memory shorter than the past: the third segment loses the first.
  short = models.get("transfo_xl").Model(dataclasses.replace(config,
                                                             mem_len=T))
  cut = _chain(jax.jit(lambda v, s, **kw: short.apply(v, s, **kw)),
               variables, x)
  assert cut[2]["new_mems"][0].shape == (2, T, config.embed_dim)
  np.testing.assert_allclose(cut[1]["hidden"], outs[1]["hidden"], atol=3e-5)
  assert np.abs(cut[2]["hidden"] - outs[2]["hidden"]).max() > 1e-3


def test_no_gradient_flows_into_the_memory(tiny):
  _, model, variables, fwd, x = tiny
  x1, x2, _ = _segments(x)
  params = variables["params"]
  run = lambda p, s, **kw: model.apply({"params": p}, s, **kw)
  loss = lambda out: jnp.mean(out["logits"] ** 2)

  def second(p, stop):
    mems = run(p, x1)["new_mems"]
    return loss(run(p, x2, mems=jax.lax.stop_gradient(mems) if stop
                    else mems))

  through, stopped = (jax.jit(jax.grad(second), static_argnums=1)(params, s)
                      for s in (False, True))
  jax.tree.map(np.testing.assert_array_equal, through, stopped)
  # new_mems are gradient-stopped, and the mems input is read-only.
  made = jax.grad(lambda p: sum(jnp.sum(m) for m in run(p, x1)["new_mems"]))
  assert all(not np.asarray(g).any()
             for g in jax.tree.leaves(jax.jit(made)(params)))
  mems = fwd(variables, x1)["new_mems"]
  read = jax.jit(lambda m: loss(run(params, x2, mems=m)))
  assert all(not np.asarray(g).any()
             for g in jax.grad(read)(mems))
  assert float(read(mems)) != float(read([m * 0 for m in mems]))


def test_future_tokens_and_other_documents_are_invisible(tiny):
  _, _, variables, fwd, x = tiny
  mems = fwd(variables, _segments(x)[0][:1])["new_mems"]
  x = mc.tokens(batch=1, length=16, pad_tail=0)
  seg = jnp.array([[1] * 10 + [2] * 6], jnp.int32)
  for kw in ({}, {"mems": mems}):
    base = fwd(variables, x, segment_ids=seg, **kw)["logits"]
    moved = fwd(variables, x.at[0, 6].set(11), segment_ids=seg,
                **kw)["logits"]
    np.testing.assert_allclose(moved[0, :6], base[0, :6], atol=1e-5)
    assert np.abs(moved[0, 6:10] - base[0, 6:10]).max() > 1e-4
    np.testing.assert_allclose(moved[0, 10:], base[0, 10:], atol=1e-5)
  # Packed documents equal each alone, positions restarting or not.
  packed = fwd(variables, x, segment_ids=seg)
  restarted = fwd(variables, x, segment_ids=seg,
                  positions=transforms.positions_from_segments(seg))
  for lo, hi in ((0, 10), (10, 16)):
    alone = fwd(variables, x[:, lo:hi])
    for got in (packed, restarted):
      for a, b in zip(got["layers"], alone["layers"]):
        np.testing.assert_allclose(a[:, lo:hi], b, atol=3e-5)
  at = jnp.array([[15, 0, 7]], jnp.int32)
  np.testing.assert_allclose(
      fwd(variables, x, segment_ids=seg, logits_at=at)["logits"],
      np.take_along_axis(np.asarray(packed["logits"]), at[..., None], 1),
      atol=1e-5)


def test_a_prefix_is_read_both_ways(tiny):
  _, _, variables, fwd, _ = tiny
  x = mc.tokens(batch=1, length=16, pad_tail=0)
  prefix = jnp.arange(16)[None] < 6
  pos = jnp.arange(16)[None]
  base = fwd(variables, x, prefix=prefix)["hidden"]
  np.testing.assert_allclose(fwd(variables, x, prefix=prefix, positions=pos)[
      "hidden"], base, atol=3e-5)
  moved = fwd(variables, x.at[0, 4].set(11), prefix=prefix)["hidden"]
  assert np.abs(moved[0, :4] - base[0, :4]).max() > 1e-4
  after = fwd(variables, x.at[0, 9].set(11), prefix=prefix)["hidden"]
  np.testing.assert_allclose(after[0, :9], base[0, :9], atol=1e-5)


def test_clm_trains_transfo_xl():
  obj = oc.build("clm", "transfo_xl")
  assert obj.interface == "decoder"
  batch = oc.tiny_batch(seq_len=32, batch_size=2)
  out = oc.train(obj, batch, steps=15)
  oc.assert_near_uniform(out["first"])
  assert out["finite"]
  assert out["last"] < 0.7 * out["first"], (out["first"], out["last"])
  doc = np.asarray(batch["doc_ids"])
  want = ((doc[:, 1:] == doc[:, :-1]) & (doc[:, :-1] > 0)).sum()
  assert out["metrics"]["weight_sum"] == want


def test_outputs_axes_and_sharded_forward():
  config, model = models.make("transfo_xl", "tiny", adapter_dim=8)
  x = mc.tokens()
  variables = mc.init(model, x)
  paths = mc.check_logical_axes(variables)
  assert any("adapter" in p for p in paths)
  assert any("position_bias" in p for p in paths)
  assert not any("segment" in p for p in paths)
  mems = jax.jit(model.apply)(variables, x)["new_mems"]
  out = mc.sharded_equals_unsharded(model, variables, x, mems=mems)
  b, t, d = 4, 16, config.embed_dim
  chex.assert_shape(out["hidden"], (b, t, d))
  chex.assert_shape(out["logits"], (b, t, config.vocab_size))
  chex.assert_shape(list(out["layers"]), (b, t, d))
  chex.assert_shape(list(out["new_mems"]), (b, 2 * t, d))
  assert len(out["new_mems"]) == config.num_layers
  assert models.interface_of("transfo_xl", config) == "decoder"
  chex.assert_tree_all_finite(out)


def test_scan_remat_and_bf16_match_the_unrolled_f32_model(tiny):
  config, _, variables, fwd, x = tiny
  x1, x2, _ = _segments(x)
  mems = fwd(variables, x1)["new_mems"]
  ref = fwd(variables, x2, mems=mems)
  scanned = models.get("transfo_xl").Model(dataclasses.replace(
      config, scan_layers=True, remat="full"))
  stacked = {"params": blocks.restack(nn.meta.unbox(variables["params"]))}
  got = jax.jit(lambda v: scanned.apply(v, x2, mems=mems))(stacked)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5),
               got, ref)
  bf16 = models.get("transfo_xl").Model(dataclasses.replace(
      config, dtype="bfloat16"))
  low = jax.jit(lambda v: bf16.apply(v, x2, mems=mems))(variables)["logits"]
  assert low.dtype == jnp.float32
  np.testing.assert_allclose(low, ref["logits"], atol=0.1)
  assert np.abs(low - ref["logits"]).max() > 0  # bf16 did run
