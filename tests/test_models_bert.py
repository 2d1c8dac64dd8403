"""BERT and RoBERTa at tiny: output shapes, axes, sharding, masks."""

import dataclasses

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import model_checks as mc
from zoo import models


@pytest.mark.slow
@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_outputs_axes_and_sharded_forward(family):
  config, model = models.make(family, "tiny", adapter_dim=8)
  x = mc.tokens()
  variables = mc.init(model, x)
  paths = mc.check_logical_axes(variables)
  assert any("adapter" in p for p in paths)
  out = mc.sharded_equals_unsharded(model, variables, x)
  b, t, d, v = 4, 16, config.embed_dim, config.vocab_size
  chex.assert_shape(out["hidden"], (b, t, d))
  chex.assert_shape(out["logits"], (b, t, v))
  chex.assert_shape(out["pooled"], (b, d))
  assert len(out["layers"]) == config.num_layers + 1
  chex.assert_shape(list(out["layers"]), (b, t, d))
  if family == "bert":
    chex.assert_shape(out["nsp_logits"], (b, 2))
  else:
    assert "nsp_logits" not in out and config.position_offset == 2
  chex.assert_tree_all_finite(out)


def test_packed_documents_do_not_leak_and_mask_is_anded():
  config, model = models.make("bert", "tiny", dropout_rate=0.0)
  x = mc.tokens(batch=1, pad_tail=0)
  seg = jnp.array([[1] * 8 + [2] * 8], jnp.int32)
  variables = mc.init(model, x)
  fwd = jax.jit(lambda v, x, s, m: model.apply(
      v, x, segment_ids=s, mask=m, return_logits=False)["hidden"])
  base = fwd(variables, x, seg, None)
  changed = fwd(variables, x.at[0, 12].set(9), seg, None)
  np.testing.assert_allclose(changed[0, :8], base[0, :8], atol=1e-6)
  assert np.abs(changed[0, 8:] - base[0, 8:]).max() > 1e-4
  causal = jnp.tril(jnp.ones((1, 16, 16), bool))
  masked = fwd(variables, x, seg, causal)
  future = fwd(variables, x.at[0, 5].set(9), seg, causal)
  np.testing.assert_allclose(future[0, :5], masked[0, :5], atol=1e-6)
  del config


def test_bf16_and_scan_configs_run_close_to_f32():
  x = mc.tokens()
  config, model = models.make("bert", "tiny")
  variables = mc.init(model, x)
  ref = jax.jit(model.apply)(variables, x)["hidden"]
  _, bf16 = models.make("bert", "tiny", dtype="bfloat16")
  got = jax.jit(bf16.apply)(variables, x)["hidden"]
  assert got.dtype == jnp.float32
  np.testing.assert_allclose(got, ref, atol=0.1)
  _, scanned = models.make("bert", "tiny", scan_layers=True, remat=True)
  boxed = jax.eval_shape(scanned.init, jax.random.key(0), x)
  assert boxed["params"]["encoder"]["layers"]["block"]["mlp"]["wi"][
      "kernel"].names == ("layers", "embed", "mlp")
  assert config.num_layers == 2


def test_unknown_size_and_field_are_refused():
  with pytest.raises(ValueError, match="huge"):
    models.make("bert", "huge")
  with pytest.raises(ValueError, match="hidden_size"):
    models.make("bert", "tiny", hidden_size=3)


@pytest.mark.parametrize("family,args", [
    ("bert", {}), ("albert", {}), ("distilbert", {}), ("unilm", {}),
    ("electra", {"role": "generator"})])
@pytest.mark.slow
def test_logits_at_equals_full_logits_gathered(family, args):
  _, model = models.make(family, "tiny", num_layers=1, **args)
  x = mc.tokens()
  variables = mc.init(model, x)
  at = jnp.array([[3, 0, 7], [15, 15, 1], [2, 9, 4], [12, 5, 0]], jnp.int32)
  fwd = jax.jit(lambda v, x, at: model.apply(v, x, logits_at=at)["logits"])
  full, some = fwd(variables, x, None), fwd(variables, x, at)
  assert some.shape == (4, 3, full.shape[-1])
  want = np.take_along_axis(np.asarray(full), np.asarray(at)[..., None], 1)
  np.testing.assert_allclose(some, want, rtol=1e-5, atol=1e-6)
  with pytest.raises(ValueError, match="logits_at"):
    model.apply(variables, x, logits_at=at[:2])


def test_alibi_bias_penalises_distance_within_documents():
  from zoo.models import positions  # pylint: disable=import-outside-toplevel
  pos = jnp.array([[0, 1, 2, 0, 1]], jnp.int32)
  bias = np.asarray(positions.alibi_bias(pos, 4))
  slopes = 2.0 ** (-8.0 * np.arange(1, 5) / 4)
  np.testing.assert_allclose(bias[0, :, 0, 2], -2 * slopes)
  np.testing.assert_allclose(bias[0, :, 4, 3], -1 * slopes)
  assert (np.diagonal(bias[0], axis1=1, axis2=2) == 0).all()
  config, model = models.make("bert", "tiny", dropout_rate=0.0)
  x = mc.tokens(batch=1, pad_tail=0)
  variables = mc.init(model, x)
  plain = model.apply(variables, x, return_logits=False)["hidden"]
  alibi = models.get("bert").Model(dataclasses.replace(config, alibi=True))
  biased = alibi.apply(variables, x, return_logits=False)["hidden"]
  assert np.abs(np.asarray(biased - plain)).max() > 1e-3


def test_trigram_input_reads_neighbours_within_documents_only():
  config, _ = models.make("bert", "tiny", dropout_rate=0.0,
                          trigram_input=True)
  model = models.get("bert").Model(config)
  x = mc.tokens(batch=1, pad_tail=0)
  seg = jnp.array([[1] * 8 + [2] * 8], jnp.int32)
  variables = mc.init(model, x)
  assert "trigram_dense" in variables["params"]["embeddings"]
  embed = jax.jit(lambda v, x: model.apply(
      v, x, segment_ids=seg, return_logits=False)["layers"][0])
  base = embed(variables, x)
  moved = embed(variables, x.at[0, 8].set(9))  # first piece of document 2
  changed = np.abs(np.asarray(moved - base)).max(-1)[0]
  # Its own embedding and its right neighbour's change; the last piece
  # of document 1 does not read across the boundary.
  assert changed[8] > 1e-4 and changed[9] > 1e-4
  assert changed[7] < 1e-6 and changed[10] < 1e-6
