"""BART at tiny: shapes, masks, packing, positions, head, axes, sharding."""

import flax.linen as nn
import jax
import numpy as np
import pytest

from tests import seq2seq_checks as sc
from zoo.models import bart, make
from zoo.models import blocks


@pytest.fixture(scope="module")
def tiny():
  return sc.build("bart")


def test_shapes_of_every_output(tiny):
  cfg, _, run, params = tiny
  sc.assert_output_shapes(cfg, run(params, sc.ids(0, (sc.B, sc.S)),
                                   sc.ids(1, (sc.B, sc.T))))


def test_head_is_the_token_table_plus_final_logits_bias(tiny):
  _, _, run, params = tiny
  out = run(params, sc.ids(0, (sc.B, sc.S)), sc.ids(1, (sc.B, sc.T)))
  p = nn.meta.unbox(params)["params"]
  want = out["hidden"] @ p["token_embed"]["embedding"].T + p[
      "final_logits_bias"]
  np.testing.assert_allclose(out["logits"], want, atol=1e-4)


def test_position_tables_have_the_offset_rows(tiny):
  cfg, _, _, params = tiny
  p = nn.meta.unbox(params)["params"]
  for stack in ("encoder", "decoder"):
    assert p[stack]["position"]["embedding"].shape == (
        cfg.max_len + 2, cfg.embed_dim)
    assert "embed_norm" in p[stack]


def test_positions_move_the_outputs_and_overflow_is_an_error(tiny):
  cfg, model, run, params = tiny
  enc, dec = sc.ids(0, (sc.B, sc.S)), sc.ids(1, (sc.B, sc.T))
  base = run(params, enc, dec)
  shifted = run(params, enc, dec, enc_pos=sc.ids(2, (sc.B, sc.S), 0, 9))
  assert np.abs(base["encoder_hidden"] - shifted["encoder_hidden"]).max() > 1e-3
  too_long = sc.ids(0, (1, cfg.max_len + 1))
  with pytest.raises(ValueError, match="exceeds max_len"):
    model.apply(params, too_long, dec[:1])


def test_decoder_is_causal(tiny):
  sc.assert_decoder_is_causal(*tiny[2:])


def test_encoder_padding_is_ignored(tiny):
  sc.assert_encoder_padding_ignored(*tiny[2:], pad_id=tiny[0].pad_id)


def test_packed_documents_match_separate_ones(tiny):
  sc.assert_packing_is_exact(*tiny[2:])


def test_encode_and_decode_methods(tiny):
  sc.assert_encode_decode_methods(tiny[1], tiny[2], tiny[3],
                                  pad_id=tiny[0].pad_id)


def test_scan_layers_equals_unrolled(tiny):
  _, _, run, params = tiny
  _, scanned = make("bart", "tiny", dropout_rate=0.0, scan_layers=True)
  restacked = {"params": blocks.restack(nn.meta.unbox(params)["params"])}
  enc, dec = sc.ids(2, (sc.B, sc.S)), sc.ids(3, (sc.B, sc.T))
  got = jax.jit(scanned.apply)(restacked, enc, dec)
  np.testing.assert_allclose(got["logits"], run(params, enc, dec)["logits"],
                             atol=1e-5)


def test_config_rejects_indivisible_heads():
  with pytest.raises(ValueError, match="not divisible by num_heads"):
    bart.Config(embed_dim=10, num_heads=4).block(decoder=False)


def test_every_param_has_valid_logical_axes():
  for kw in ({}, {"scan_layers": True, "adapter_dim": 4}):
    _, model = make("bart", "tiny", **kw)
    sc.assert_valid_logical_axes(model, sc.ids(0, (sc.B, sc.S)),
                                 sc.ids(1, (sc.B, sc.T)))


def test_sharded_forward_equals_unsharded(tiny):
  _, model, run, params = tiny
  enc, dec = sc.ids(4, (sc.B, sc.S)), sc.ids(5, (sc.B, sc.T))
  want = run(params, enc, dec)
  got = sc.sharded_apply(model, params, enc, dec)
  for key in ("logits", "hidden", "encoder_hidden"):
    np.testing.assert_allclose(got[key], want[key], atol=1e-5)
