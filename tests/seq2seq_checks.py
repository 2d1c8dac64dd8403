"""Checks shared by the encoder-decoder model tests (not a test module)."""

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from tests.fast_params import fast_params
from zoo import sharding
from zoo.models import make

B, S, T = 2, 9, 7
MESH = {"data": 2, "fsdp": 2, "tensor": 2}


def ids(seed, shape, low=7, high=400):
  """Random int32 token ids avoiding the special ids."""
  return jax.random.randint(jax.random.key(seed), shape, low, high, jnp.int32)


def build(family, **overrides):
  """(config, model, apply, params) at tiny with dropout off.

  `apply` runs op by op: for tiny models that beats compiling each of the
  few input shapes a test uses.
  """
  cfg, model = make(family, "tiny", dropout_rate=0.0, **overrides)
  params = fast_params(model, ids(0, (B, S)), ids(1, (B, T)))
  return cfg, model, model.apply, params


def assert_output_shapes(cfg, out):
  """Every named output of an encoder-decoder call has its shape."""
  d, v = cfg.embed_dim, cfg.vocab_size
  n_dec = (cfg.num_decoder_layers or cfg.num_layers) + 1
  chex.assert_shape(out["logits"], (B, T, v))
  chex.assert_shape(out["hidden"], (B, T, d))
  chex.assert_shape(out["encoder_hidden"], (B, S, d))
  chex.assert_shape(list(out["layers"]), [(B, T, d)] * n_dec)
  chex.assert_shape(list(out["encoder_layers"]),
                    [(B, S, d)] * (cfg.num_layers + 1))
  chex.assert_type(jax.tree.leaves(out), jnp.float32)
  chex.assert_tree_all_finite(out)


def assert_valid_logical_axes(model, *args):
  """Every param is boxed with logical names that the default rules place."""
  abstract = jax.eval_shape(model.init, jax.random.key(0), *args)
  is_box = lambda x: isinstance(x, nn.LogicallyPartitioned)
  leaves = jax.tree.leaves(abstract, is_leaf=is_box)
  unboxed = [x for x in leaves if not is_box(x)]
  assert leaves and not unboxed, f"params without logical axes: {unboxed}"
  mesh = sharding.make_mesh(MESH)
  specs = sharding.logical_shardings(abstract, mesh, sharding.DEFAULT_RULES)
  assert len(jax.tree.leaves(specs)) == len(leaves)
  # The big tables really are split, not silently replicated.
  flat = jax.tree_util.tree_flatten_with_path(specs)[0]
  assert any("tensor" in str(s.spec) for _, s in flat)


def sharded_apply(model, params, *args, **kw):
  """The forward with params and inputs placed on the 8-device mesh."""
  mesh = sharding.make_mesh(MESH)
  rules = sharding.DEFAULT_RULES
  placed = jax.device_put(nn.meta.unbox(params),
                          sharding.logical_shardings(params, mesh, rules))
  inputs = [jax.device_put(a, sharding.batch_sharding(mesh, rules))
            for a in args]
  with sharding.activate(mesh, rules):
    return jax.jit(model.apply)(placed, *inputs, **kw)


def packed_vs_separate(apply, params):
  """Two documents packed in one row vs each alone: (packed, [a, b]).

  Positions restart per document, as the packer emits them.
  """
  enc_a, enc_b = ids(3, (1, 5)), ids(4, (1, 4))
  dec_a, dec_b = ids(5, (1, 4)), ids(6, (1, 3))
  packed = apply(
      params, jnp.concatenate([enc_a, enc_b], 1),
      jnp.concatenate([dec_a, dec_b], 1),
      enc_segment_ids=jnp.array([[1] * 5 + [2] * 4]),
      dec_segment_ids=jnp.array([[1] * 4 + [2] * 3]),
      enc_positions=jnp.array([list(range(5)) + list(range(4))]),
      dec_positions=jnp.array([list(range(4)) + list(range(3))]))
  alone = [apply(params, enc_a, dec_a), apply(params, enc_b, dec_b)]
  return packed, alone


def assert_packing_is_exact(apply, params):
  """Packed documents give the same states as each document alone."""
  packed, (a, b) = packed_vs_separate(apply, params)
  for key, cut in (("hidden", 4), ("logits", 4), ("encoder_hidden", 5)):
    np.testing.assert_allclose(packed[key][:, :cut], a[key], atol=1e-5)
    np.testing.assert_allclose(packed[key][:, cut:], b[key], atol=1e-5)


def assert_decoder_is_causal(apply, params):
  """Changing decoder tokens after t leaves outputs at <= t unchanged."""
  enc, dec = ids(7, (B, S)), ids(8, (B, T))
  t = 3
  changed = dec.at[:, t + 1:].set(ids(9, (B, T))[:, t + 1:])
  out, out2 = apply(params, enc, dec), apply(params, enc, changed)
  np.testing.assert_allclose(out["logits"][:, :t + 1],
                             out2["logits"][:, :t + 1], atol=1e-6)
  assert np.abs(out["logits"][:, t + 1:] - out2["logits"][:, t + 1:]).max() > 1e-4


def assert_encoder_padding_ignored(apply, params, pad_id):
  """Padded encoder positions (their ids, too) never reach the decoder."""
  enc, dec = ids(10, (B, S)), ids(11, (B, T))
  seg = jnp.ones((B, S), jnp.int32).at[1, 6:].set(0)
  enc = jnp.where(seg == 1, enc, pad_id)
  other = jnp.where(seg == 1, enc, ids(12, (B, S)))
  out = apply(params, enc, dec, enc_segment_ids=seg)
  out2 = apply(params, other, dec, enc_segment_ids=seg)
  np.testing.assert_allclose(out["logits"], out2["logits"], atol=1e-5)
  # Default segments come from pad_id and agree with the explicit ones.
  np.testing.assert_allclose(apply(params, enc, dec)["logits"],
                             out["logits"], atol=1e-5)


def assert_encode_decode_methods(model, params):
  """`encode` then `decode` reproduce the one-call forward."""
  enc, dec = ids(13, (B, S)), ids(14, (B, T))
  seg = jnp.ones((B, S), jnp.int32).at[0, 7:].set(0)
  full = model.apply(params, enc, dec, enc_segment_ids=seg)
  e = model.apply(params, enc, enc_segment_ids=seg, method="encode")
  d = model.apply(params, dec, e["encoder_hidden"], enc_segment_ids=seg,
                  method="decode")
  np.testing.assert_allclose(d["logits"], full["logits"], atol=1e-6)
  np.testing.assert_allclose(e["encoder_hidden"], full["encoder_hidden"])
