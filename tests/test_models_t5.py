"""T5 at tiny: shapes, masks, packing, head variants, axes and sharding."""

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from objectives import transforms
from tests import seq2seq_checks as sc
from tests.fast_params import fast_params
from zoo.models import heads, make, t5
from zoo.models import blocks


@pytest.fixture(scope="module")
def tiny():
  return sc.build("t5")


def test_shapes_of_every_output(tiny):
  cfg, _, apply, params = tiny
  sc.assert_output_shapes(cfg, apply(params, sc.ids(0, (sc.B, sc.S)),
                                     sc.ids(1, (sc.B, sc.T))))


def test_v11_layout_has_no_biases_and_an_own_head(tiny):
  cfg, _, _, params = tiny
  names = ["/".join(str(getattr(k, "key", k)) for k in path)
           for path, _ in jax.tree_util.tree_flatten_with_path(
               nn.meta.unbox(params))[0]]
  assert not [n for n in names if n.endswith("bias") and "relpos" not in n]
  assert any(n.startswith("params/lm_head") for n in names)
  assert any("wi_0" in n for n in names) and cfg.activation.startswith("gated")
  # One relative-bias table per stack, shared by its layers.
  assert sum("rel_embedding" in n for n in names) == 2


def test_decoder_is_causal(tiny):
  sc.assert_decoder_is_causal(*tiny[2:])


def test_encoder_padding_is_ignored(tiny):
  sc.assert_encoder_padding_ignored(*tiny[2:], pad_id=0)


def test_packed_documents_match_separate_ones(tiny):
  sc.assert_packing_is_exact(*tiny[2:])


def _packed_rows():
  """Segment ids [B, S] and [B, T] of packed, padded rows, and the
  positions the packer gives them."""
  def rows(length, seed):
    cuts = np.random.default_rng(seed).integers(1, length, (sc.B, 3))
    seg = [np.searchsorted(np.sort(c), np.arange(length), side="right") + 1
           for c in cuts]
    seg = np.stack(seg) * (np.arange(length) < length - 1)  # last one pads
    seg = jnp.asarray(seg, jnp.int32)
    return seg, transforms.positions_from_segments(seg)
  return rows(sc.S, 0), rows(sc.T, 1)


def test_relpos_offsets_equal_positions_on_packed_rows(tiny):
  """The bias from row offsets (the default, one [1, N, T, S] for the
  batch) is the bias from the packer's positions, in every output and
  every gradient; only positions with gaps tell the two apart."""
  cfg, _, offsets, params = tiny
  assert cfg.relpos_from == "offsets"
  positions = sc.build("t5", relpos_from="positions")[2]
  (enc_seg, enc_pos), (dec_seg, dec_pos) = _packed_rows()
  enc, dec = sc.ids(7, (sc.B, sc.S)), sc.ids(8, (sc.B, sc.T))
  w = jax.random.normal(jax.random.key(9), (sc.B, sc.T, cfg.vocab_size))

  def outputs(run, enc_pos, dec_pos):
    loss = lambda p: jnp.sum(w * run(p, enc, dec, enc_seg, dec_seg, enc_pos,
                                     dec_pos)["logits"])
    return (run(params, enc, dec, enc_seg, dec_seg, enc_pos, dec_pos),
            jax.grad(loss)(params))

  want, got = outputs(positions, enc_pos, dec_pos), outputs(
      offsets, enc_pos, dec_pos)
  for g, x in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    # float rounding, on the scale of the leaf: sums are taken in
    # another order (the shared bias's gradient sums over the batch)
    np.testing.assert_allclose(g, x, rtol=0,
                               atol=2e-6 * float(np.abs(x).max()) + 1e-7)
  gapped = outputs(positions, enc_pos * 3, dec_pos * 3)[0]["logits"]
  assert not np.allclose(gapped, want[0]["logits"], atol=1e-3)
  ignored = outputs(offsets, enc_pos * 3, dec_pos * 3)[0]["logits"]
  np.testing.assert_array_equal(ignored, got[0]["logits"])


def test_unknown_relpos_from_is_an_error():
  with pytest.raises(ValueError, match="relpos_from 'rows'"):
    sc.build("t5", relpos_from="rows")


@pytest.mark.slow
def test_encode_and_decode_methods(tiny):
  sc.assert_encode_decode_methods(tiny[1], tiny[2], tiny[3], pad_id=0)


def test_original_t5_head_is_tied_and_scaled():
  cfg, model, apply, params = sc.build(
      "t5", activation="relu", tie_embeddings=True, scale_logits=True)
  assert "lm_head" not in params["params"]
  out = apply(params, sc.ids(0, (sc.B, sc.S)), sc.ids(1, (sc.B, sc.T)))
  table = nn.meta.unbox(params["params"]["token_embed"]["embedding"])
  want = (out["hidden"] * cfg.embed_dim ** -0.5) @ table.T
  np.testing.assert_allclose(out["logits"], want, atol=1e-4)
  del model


def test_encoder_only_follows_the_encoder_face():
  cfg, model = make("t5", "tiny", encoder_only=True)
  tokens = sc.ids(0, (sc.B, sc.S)).at[1, 6:].set(0)
  params = fast_params(model, tokens)
  assert "decoder" not in params["params"]
  out = jax.jit(model.apply)(params, tokens)
  chex.assert_shape(out["hidden"], (sc.B, sc.S, cfg.embed_dim))
  chex.assert_shape(out["logits"], (sc.B, sc.S, cfg.vocab_size))
  assert len(out["layers"]) == cfg.num_layers + 1
  assert t5.interface(cfg) == "encoder"
  with pytest.raises(ValueError, match="takes no dec_tokens"):
    model.apply(params, tokens, tokens)
  with pytest.raises(ValueError, match="no token types"):
    model.apply(params, tokens, token_types=tokens)
  assert "logits" not in model.apply(params, tokens, return_logits=False)


def test_encdec_without_decoder_tokens_is_an_error(tiny):
  _, model, _, params = tiny
  with pytest.raises(ValueError, match="needs dec_tokens"):
    model.apply(params, sc.ids(0, (sc.B, sc.S)))


def test_scan_layers_equals_unrolled(tiny):
  _, _, apply, params = tiny
  _, scanned = make("t5", "tiny", dropout_rate=0.0, scan_layers=True)
  restacked = {"params": blocks.restack(nn.meta.unbox(params)["params"])}
  enc, dec = sc.ids(2, (sc.B, sc.S)), sc.ids(3, (sc.B, sc.T))
  want = apply(params, enc, dec)
  got = jax.jit(scanned.apply)(restacked, enc, dec)
  np.testing.assert_allclose(got["logits"], want["logits"], atol=1e-5)


def test_adapters_sit_in_every_block_and_are_masked():
  _, model = make("t5", "tiny", adapter_dim=4)
  enc, dec = sc.ids(2, (sc.B, sc.S)), sc.ids(3, (sc.B, sc.T))
  with_adapters = fast_params(model, enc, dec)
  mask = heads.adapter_mask(with_adapters, train_head=False)
  # down/up kernel+bias after attention and MLP, and cross-attention in the
  # decoder: 2 encoder and 2 decoder layers.
  assert sum(jax.tree.leaves(mask)) == 4 * (2 * 2 + 3 * 2)
  assert not heads.adapter_mask(with_adapters)["params"]["token_embed"][
      "embedding"]
  out = jax.jit(model.apply)(with_adapters, enc, dec)
  chex.assert_tree_all_finite(out["logits"])


def test_bfloat16_compute_stays_close(tiny):
  _, _, apply, params = tiny
  _, model16 = make("t5", "tiny", dropout_rate=0.0, dtype="bfloat16")
  enc, dec = sc.ids(2, (sc.B, sc.S)), sc.ids(3, (sc.B, sc.T))
  got = jax.jit(model16.apply)(params, enc, dec)["logits"]
  want = apply(params, enc, dec)["logits"]
  assert got.dtype == jnp.float32
  assert np.abs(got - want).max() < 0.05 * np.abs(want).max()


def test_every_param_has_valid_logical_axes():
  for kw in ({}, {"scan_layers": True, "adapter_dim": 4}):
    _, model = make("t5", "tiny", **kw)
    sc.assert_valid_logical_axes(model, sc.ids(0, (sc.B, sc.S)),
                                 sc.ids(1, (sc.B, sc.T)))


def test_sharded_forward_equals_unsharded(tiny):
  _, model, apply, params = tiny
  enc, dec = sc.ids(4, (sc.B, sc.S)), sc.ids(5, (sc.B, sc.T))
  want = apply(params, enc, dec)
  got = sc.sharded_apply(model, params, enc, dec)
  for key in ("logits", "hidden", "encoder_hidden"):
    np.testing.assert_allclose(got[key], want[key], atol=1e-5)


def test_mesh_tf_init_draws_each_table_at_t5s_scale():
  """T5's init (`init="mesh_tf"`, the default): kernels N(0, 1/fan_in), the
  query N(0, 1/(D*H)), relative bias and untied head N(0, 1/D); "normal"
  is N(0, 0.02) throughout; an unknown name is refused."""
  d, n, h, f = 128, 4, 32, 256
  shape = dict(vocab_size=600, num_layers=1, embed_dim=d, num_heads=n,
               head_dim=h, mlp_dim=f, relpos_buckets=512)
  ids = jnp.ones((1, 4), jnp.int32)

  def stds(**kw):
    model = t5.Model(t5.Config(**shape, **kw))
    p = nn.meta.unbox(model.init(jax.random.PRNGKey(0), ids, ids)["params"])
    block = p["decoder"]["stack"]["layer_0"]
    return {"query": block["cross_attention"]["query"]["kernel"].std(),
            "key": block["attention"]["key"]["kernel"].std(),
            "out": block["attention"]["out"]["kernel"].std(),
            "wi_0": block["mlp"]["wi_0"]["kernel"].std(),
            "wo": block["mlp"]["wo"]["kernel"].std(),
            "relpos": p["encoder"]["relpos"]["rel_embedding"].std(),
            "lm_head": p["lm_head"]["kernel"].std(),
            "embed": p["token_embed"]["embedding"].std()}

  want = {"query": (d * h) ** -0.5, "key": d ** -0.5, "out": (n * h) ** -0.5,
          "wi_0": d ** -0.5, "wo": f ** -0.5, "relpos": d ** -0.5,
          "lm_head": d ** -0.5, "embed": 1.0}
  got = stds()
  for name, std in want.items():
    np.testing.assert_allclose(got[name], std, rtol=0.05, err_msg=name)
  got = stds(init="normal")
  for name in want:
    if name != "embed":
      np.testing.assert_allclose(got[name], 0.02, rtol=0.05, err_msg=name)
  with pytest.raises(ValueError, match="init 'xavier'"):
    stds(init="xavier")
