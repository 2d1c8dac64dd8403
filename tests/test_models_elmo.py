"""ELMo: shapes, one-sided LMs, document resets, LSTM parity, sharding."""

import functools

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from tests.fast_params import fast_params
from zoo import sharding
from zoo.models import elmo, heads, lstm, make

B, T = 4, 9  # B divisible by the mesh's data x fsdp


def _tokens(seed=0, b=B, t=T):
  return jax.random.randint(jax.random.key(seed), (b, t), 7, 500, jnp.int32)


@pytest.fixture(scope="module")
def tiny():
  """(config, jitted apply, tokens [B,T], params) of the token-table model."""
  cfg, model = make("elmo", "tiny")
  tokens = _tokens()
  return cfg, jax.jit(model.apply), tokens, fast_params(model, tokens)


def test_shapes_of_every_output(tiny):
  cfg, run, tokens, params = tiny
  out = run(params, tokens)
  d2 = 2 * cfg.embed_dim
  chex.assert_shape(out["forward_logits"], (B, T, cfg.vocab_size))
  chex.assert_shape(out["backward_logits"], (B, T, cfg.vocab_size))
  chex.assert_shape(out["hidden"], (B, T, d2))
  assert len(out["layers"]) == cfg.num_layers + 1
  chex.assert_shape(list(out["layers"]), [(B, T, d2)] * (cfg.num_layers + 1))
  chex.assert_tree_all_finite(out)
  chex.assert_type([out["hidden"], out["forward_logits"]], jnp.float32)


def _states(run, params, tokens):
  """Every layer split into forward [L+1,B,T,D] and backward halves."""
  layers = jnp.stack(run(params, tokens)["layers"])
  d = layers.shape[-1] // 2
  return layers[..., :d], layers[..., d:]


def test_forward_lm_never_sees_the_future(tiny):
  _, run, tokens, params = tiny
  t = 4
  future = tokens.at[:, t + 1:].set(_tokens(7)[:, t + 1:])
  fwd, bwd = _states(run, params, tokens)
  fwd2, bwd2 = _states(run, params, future)
  np.testing.assert_array_equal(fwd[:, :, :t + 1], fwd2[:, :, :t + 1])
  # The perturbation is real: the backward LM at t does see it.
  assert np.abs(bwd[1:, :, :t + 1] - bwd2[1:, :, :t + 1]).max() > 1e-3
  logits = run(params, tokens)["forward_logits"][:, :t + 1]
  logits2 = run(params, future)["forward_logits"][:, :t + 1]
  np.testing.assert_array_equal(logits, logits2)


def test_backward_lm_never_sees_the_past(tiny):
  _, run, tokens, params = tiny
  t = 4
  past = tokens.at[:, :t].set(_tokens(8)[:, :t])
  fwd, bwd = _states(run, params, tokens)
  fwd2, bwd2 = _states(run, params, past)
  np.testing.assert_array_equal(bwd[:, :, t:], bwd2[:, :, t:])
  assert np.abs(fwd[1:, :, t:] - fwd2[1:, :, t:]).max() > 1e-3


def test_packed_documents_do_not_leak(tiny):
  _, run, _, params = tiny
  a, b = _tokens(3, 1, 5), _tokens(4, 1, 4)
  packed = jnp.concatenate([a, b], axis=1)
  # Row 1: a, then b, each alone, padded; padding gets its own segment 0.
  alone = jnp.concatenate([a, jnp.zeros((1, 4), jnp.int32)], axis=1)
  seg = jnp.array([[1] * 5 + [2] * 4, [1] * 5 + [0] * 4], jnp.int32)
  out = jnp.stack(run(params, jnp.concatenate([packed, alone]),
                      segment_ids=seg)["layers"])
  np.testing.assert_allclose(out[:, 0, :5], out[:, 1, :5], atol=1e-6)
  alone_b = jnp.concatenate([b, jnp.zeros((1, 5), jnp.int32)], axis=1)
  seg_b = jnp.array([[2] * 4 + [0] * 5, [1] * 4 + [0] * 5], jnp.int32)
  out_b = jnp.stack(run(params, jnp.concatenate([alone_b, alone_b]),
                        segment_ids=seg_b)["layers"])
  np.testing.assert_allclose(out[:, 0, 5:], out_b[:, 0, :4], atol=1e-6)
  # Segment ids are labels only: 2 alone behaves as 1 alone.
  np.testing.assert_allclose(out_b[:, 0], out_b[:, 1], atol=1e-6)


def test_char_cnn_and_char_table():
  cfg, model = make("elmo", "tiny", char_cnn=True)
  table = elmo.char_table(["<pad>", "a", "héllo", "x" * 40], cfg.max_chars)
  assert table.shape == (4, cfg.max_chars)
  assert list(table[1, :4]) == [elmo.BOW_CHAR, ord("a") + 1, elmo.EOW_CHAR, 0]
  assert table[3, -1] == elmo.EOW_CHAR  # long pieces keep the end marker
  tokens = jnp.array([[1, 2, 3, 0]], jnp.int32)
  chars = jnp.asarray(table)[tokens]
  params = fast_params(model, tokens, chars=chars)
  out = jax.jit(model.apply)(params, tokens, chars=chars)
  chex.assert_shape(out["hidden"], (1, 4, 2 * cfg.embed_dim))
  assert "token_embedding" not in params["params"]
  with pytest.raises(ValueError, match="needs chars"):
    model.apply(params, tokens)


def test_tied_softmax_uses_the_token_table():
  cfg, model = make("elmo", "tiny", tie_embeddings=True)
  tokens = _tokens()
  params = fast_params(model, tokens)
  assert "softmax_kernel" not in params["params"]
  out = jax.jit(model.apply)(params, tokens)
  table = nn.meta.unbox(params["params"]["token_embedding"])
  top = out["hidden"][..., :cfg.embed_dim]
  want = top @ table.T + nn.meta.unbox(params["params"]["softmax_bias"])
  np.testing.assert_allclose(out["forward_logits"], want, atol=1e-4)


@pytest.mark.parametrize("override,words", [
    (dict(scan_layers=True), "scan_layers"),
    (dict(char_cnn=True, tie_embeddings=True), "tie_embeddings"),
])
def test_bad_configs_are_named(override, words):
  _, model = make("elmo", "tiny", **override)
  with pytest.raises(ValueError, match=words):
    model.init(jax.random.key(1), _tokens(),
               chars=jnp.ones((B, T, 12), jnp.int32))


def test_projected_lstm_matches_torch():
  din, cells, proj = 5, 6, 3
  layer = lstm.LSTM(cells, proj_dim=proj)
  x = jax.random.normal(jax.random.key(0), (2, 7, din))
  seg = jnp.ones((2, 7), jnp.int32)
  params = nn.meta.unbox(fast_params(layer, x, seg))["params"]
  ref = torch.nn.LSTM(din, cells, proj_size=proj, batch_first=True)
  with torch.no_grad():
    ref.weight_ih_l0.copy_(torch.tensor(np.array(params["input_kernel"]).T))
    ref.weight_hh_l0.copy_(torch.tensor(np.array(params["state_kernel"]).T))
    ref.bias_ih_l0.copy_(torch.tensor(np.array(params["bias"])))
    ref.bias_hh_l0.zero_()
    ref.weight_hr_l0.copy_(torch.tensor(np.array(params["proj_kernel"]).T))
    want = ref(torch.tensor(np.array(x)))[0].numpy()
  got = jax.jit(layer.apply)({"params": params}, x, seg)
  np.testing.assert_allclose(got, want, atol=1e-5)


def test_bfloat16_compute_stays_close(tiny):
  cfg, _, tokens, params = tiny
  _, model16 = make("elmo", "tiny", dtype="bfloat16")
  out = jax.jit(model16.apply)(params, tokens)
  ref = tiny[1](params, tokens)
  assert out["hidden"].dtype == jnp.float32
  assert np.abs(out["hidden"] - ref["hidden"]).max() < 0.1


def test_every_param_has_valid_logical_axes():
  _, model = make("elmo", "tiny", char_cnn=True)
  tokens = _tokens()
  chars = jnp.ones((B, T, 12), jnp.int32)
  abstract = jax.eval_shape(model.init, jax.random.key(0), tokens, chars=chars)
  leaves = jax.tree.leaves(abstract, is_leaf=lambda x: isinstance(
      x, nn.LogicallyPartitioned))
  assert leaves and all(isinstance(x, nn.LogicallyPartitioned) for x in leaves)
  mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  specs = sharding.logical_shardings(abstract, mesh, sharding.DEFAULT_RULES)
  assert len(jax.tree.leaves(specs)) == len(leaves)


def test_sharded_forward_equals_unsharded(tiny):
  _, run, _, params = tiny
  _, model = make("elmo", "tiny")
  tokens = _tokens(5)
  want = run(params, tokens)
  mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  rules = sharding.DEFAULT_RULES
  shard = sharding.logical_shardings(params, mesh, rules)
  sharded = jax.device_put(nn.meta.unbox(params), shard)
  toks = jax.device_put(tokens, sharding.batch_sharding(mesh, rules))
  with sharding.activate(mesh, rules):
    got = jax.jit(model.apply)(sharded, toks)
  np.testing.assert_allclose(got["hidden"], want["hidden"], atol=1e-5)
  np.testing.assert_allclose(got["forward_logits"], want["forward_logits"],
                             atol=1e-5)


def test_remat_and_dropout(tiny):
  _, run, tokens, params = tiny
  _, remat = make("elmo", "tiny", remat=True)
  want = run(params, tokens)["hidden"]
  np.testing.assert_allclose(jax.jit(remat.apply)(params, tokens)["hidden"],
                             want, atol=1e-6)
  train = jax.jit(functools.partial(remat.apply, deterministic=False))
  a = train(params, tokens, rngs={"dropout": jax.random.key(1)})["hidden"]
  b = train(params, tokens, rngs={"dropout": jax.random.key(1)})["hidden"]
  np.testing.assert_array_equal(a, b)
  assert np.abs(a - want).max() > 1e-3


def test_adapters_follow_every_lstm_layer(tiny):
  cfg, _, tokens, _ = tiny
  _, model = make("elmo", "tiny", adapter_dim=4)
  params = fast_params(model, tokens)
  mask = heads.adapter_mask(params, train_head=False)
  # down/up kernel+bias, per direction and layer.
  assert sum(jax.tree.leaves(mask)) == 4 * 2 * cfg.num_layers
  init = jax.eval_shape(model.init, jax.random.key(0), tokens)
  up = nn.meta.unbox(init)["params"]["adapter_forward_1"]["up"]["kernel"]
  assert up.shape == (4, cfg.embed_dim)
