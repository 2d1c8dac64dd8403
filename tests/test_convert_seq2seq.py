"""T5 and BART from Hugging Face: parity with transformers (PyTorch)."""

import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers

from tests import hf_parity as hp
from zoo import convert
from zoo import models
from zoo.convert import bart as bart_convert
from zoo.convert import t5 as t5_convert

V = 99
T5_SMALL = dict(vocab_size=V, d_model=32, d_kv=8, d_ff=37, num_layers=2,
                num_decoder_layers=3, num_heads=4,
                relative_attention_num_buckets=8,
                relative_attention_max_distance=16,
                attn_implementation="eager")
BART_SMALL = dict(vocab_size=V, d_model=32, encoder_layers=2,
                  decoder_layers=3, encoder_attention_heads=4,
                  decoder_attention_heads=4, encoder_ffn_dim=37,
                  decoder_ffn_dim=37, max_position_embeddings=24,
                  attn_implementation="eager")


def _batch(pad, start):
  """Encoder and decoder ids, each with a right-padded row, and masks."""
  enc, enc_mask = hp.padded_ids(V, pad, shape=(2, 9), seed=0)
  dec, dec_mask = hp.padded_ids(V, pad, shape=(2, 7), seed=1)
  dec[:, 0] = start
  return enc, enc_mask, dec, dec_mask


def _reference(model, enc, enc_mask, dec, dec_mask):
  with torch.no_grad():
    return model.eval()(
        input_ids=torch.tensor(enc), attention_mask=torch.tensor(enc_mask),
        decoder_input_ids=torch.tensor(dec),
        decoder_attention_mask=torch.tensor(dec_mask),
        output_hidden_states=True)


def _ours(folder, enc, enc_mask, dec, dec_mask, **overrides):
  family, config, params = convert.from_hf(folder, **overrides)
  model = models.get(family).Model(config)
  out = model.apply({"params": params}, jnp.asarray(enc, jnp.int32),
                    jnp.asarray(dec, jnp.int32),
                    enc_segment_ids=jnp.asarray(enc_mask, jnp.int32),
                    dec_segment_ids=jnp.asarray(dec_mask, jnp.int32))
  return family, config, out


def _assert_parity(out, ref, enc_mask, dec_mask):
  """Encoder and decoder states (every layer) and logits within TOL."""
  assert hp.max_diff(out["encoder_hidden"], ref.encoder_last_hidden_state,
                     enc_mask) < hp.TOL
  assert hp.max_diff(out["hidden"], ref.decoder_hidden_states[-1],
                     dec_mask) < hp.TOL
  assert hp.max_diff(out["logits"], ref.logits, dec_mask) < hp.TOL
  pairs = [(out["encoder_layers"], ref.encoder_hidden_states, enc_mask),
           (out["layers"], ref.decoder_hidden_states, dec_mask)]
  for ours, theirs, mask in pairs:
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
      assert hp.max_diff(a, b, mask) < hp.TOL


@pytest.fixture(scope="module")
def t5_v11(tmp_path_factory):
  """A gated-GELU T5 v1.1 with its own (untied, unscaled) LM head."""
  torch.manual_seed(0)
  model = transformers.T5ForConditionalGeneration(transformers.T5Config(
      feed_forward_proj="gated-gelu", tie_word_embeddings=False, **T5_SMALL))
  model.lm_head.weight = torch.nn.Parameter(torch.randn(V, 32))
  return model, hp.save(model, tmp_path_factory.mktemp("t5_v11"))


@pytest.mark.slow
def test_t5_v11_parity(t5_v11):
  model, folder = t5_v11
  batch = _batch(pad=0, start=0)
  family, config, out = _ours(folder, *batch)
  assert family == "t5" and config.activation == "gated_gelu_tanh"
  assert not config.tie_embeddings and not config.scale_logits
  assert config.num_decoder_layers == 3
  _assert_parity(out, _reference(model, *batch), batch[1], batch[3])


@pytest.mark.slow
def test_t5_original_relu_tied_parity(tmp_path):
  torch.manual_seed(1)
  model = transformers.T5ForConditionalGeneration(transformers.T5Config(
      feed_forward_proj="relu", **T5_SMALL))
  batch = _batch(pad=0, start=0)
  family, config, out = _ours(hp.save(model, tmp_path), *batch)
  assert family == "t5" and config.activation == "relu"
  assert config.tie_embeddings and config.scale_logits
  _assert_parity(out, _reference(model, *batch), batch[1], batch[3])


def test_t5_scan_layers_import_matches_unrolled(t5_v11):
  _, folder = t5_v11
  batch = _batch(pad=0, start=0)
  _, _, flat = _ours(folder, *batch)
  _, config, scanned = _ours(folder, *batch, scan_layers=True)
  assert config.scan_layers
  np.testing.assert_allclose(scanned["logits"], flat["logits"], atol=1e-5)


@pytest.mark.parametrize("scale_embedding", [False, True])
def test_bart_parity(tmp_path, scale_embedding):
  torch.manual_seed(2)
  model = transformers.BartForConditionalGeneration(transformers.BartConfig(
      scale_embedding=scale_embedding, **BART_SMALL))
  with torch.no_grad():  # a non-zero bias, so the test can see it
    model.final_logits_bias.normal_()
  batch = _batch(pad=1, start=2)
  family, config, out = _ours(hp.save(model, tmp_path), *batch)
  assert family == "bart" and config.pad_id == 1
  assert config.decoder_start_id == 2
  assert config.scale_embedding == scale_embedding
  _assert_parity(out, _reference(model, *batch), batch[1], batch[3])


def test_t5_head_conventions_from_config():
  assert t5_convert.scales_logits({})  # original T5 default: tied, scaled
  assert not t5_convert.scales_logits({"tie_word_embeddings": False})
  assert not t5_convert.scales_logits(
      {"tie_word_embeddings": True, "scale_decoder_outputs": False})
  shared = np.ones((3, 2), np.float32)
  assert not t5_convert.own_head({"shared.weight": shared})
  assert not t5_convert.own_head({"shared.weight": shared,
                                  "lm_head.weight": shared.copy()})
  assert t5_convert.own_head({"shared.weight": shared,
                              "lm_head.weight": 2 * shared})


@pytest.mark.parametrize("proj,want", [
    ("gated-gelu", "gated_gelu_tanh"), ("relu", "relu"),
    ("gated-silu", "gated_silu"), ("gelu_new", "gelu_tanh")])
def test_t5_activation_names(proj, want):
  assert t5_convert.activation(proj) == want


@pytest.mark.parametrize("proj,words", [
    ("gated-gelu-x", "is not '<act>'"), ("tanh", "unsupported T5 activation"),
    ("double-relu", "is not '<act>'")])
def test_t5_bad_activation_is_named(proj, words):
  with pytest.raises(ValueError, match=words):
    t5_convert.activation(proj)


def test_bart_variants_we_do_not_run_are_refused():
  base = dict(vocab_size=V, d_model=32, encoder_layers=2,
              encoder_attention_heads=4, encoder_ffn_dim=37,
              max_position_embeddings=24)
  with pytest.raises(ValueError, match="normalize_before"):
    bart_convert.make_config(dict(base, normalize_before=True))
  with pytest.raises(ValueError, match="decoder_ffn_dim"):
    bart_convert.make_config(dict(base, decoder_ffn_dim=11))
  with pytest.raises(ValueError, match="activation_function"):
    bart_convert.make_config(dict(base, activation_function="tanh"))


def test_bart_untied_head_is_refused():
  shared = np.ones((4, 2), np.float32)
  tensors = {"model.shared.weight": shared, "lm_head.weight": 2 * shared}
  with pytest.raises(ValueError, match="differs from the shared token"):
    bart_convert.convert(dict(vocab_size=4, d_model=2, encoder_layers=1,
                              encoder_attention_heads=1, encoder_ffn_dim=2,
                              max_position_embeddings=8), tensors)
