"""Building blocks: masks, the attention kernel, norms, MLP, stacks."""

import dataclasses

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from transformers.models.t5 import modeling_t5

from zoo import models
from zoo.models import blocks
from zoo.models import layers
from zoo.models import masks

KEY = jax.random.key(0)


def _qkv(b=2, t=5, s=6, n=2, h=4):
  ks = jax.random.split(KEY, 3)
  return (jax.random.normal(ks[0], (b, t, n, h)),
          jax.random.normal(ks[1], (b, s, n, h)),
          jax.random.normal(ks[2], (b, s, n, h)))


def test_segment_mask_keeps_documents_apart():
  seg = jnp.array([[1, 1, 2, 2, 0]])
  m = np.asarray(layers.segment_mask(seg))[0]
  assert m[0, 1] and m[2, 3] and not m[1, 2] and not m[3, 0]
  assert not m[:, 4].any()  # nobody attends to padding


def test_causal_prefix_and_seq2seq_masks():
  causal = np.asarray(layers.causal_mask(4))[0]
  np.testing.assert_array_equal(causal, np.tril(np.ones((4, 4), bool)))
  prefix = np.asarray(layers.prefix_lm_mask(
      masks.prefix_from_lengths(jnp.array([2, 0]), 4)))
  # Row 0: tokens 0-1 see each other both ways; 2 sees 0..2, not 3.
  assert prefix[0, 0, 1] and prefix[0, 2, 1] and not prefix[0, 2, 3]
  assert not prefix[0, 1, 2]  # the source never sees the target
  np.testing.assert_array_equal(prefix[1], causal)
  offset = np.asarray(layers.causal_mask(2, 4))[0]  # queries at 2, 3
  np.testing.assert_array_equal(offset, [[1, 1, 1, 0], [1, 1, 1, 1]])


def test_branch_mask_shares_the_prefix_and_keeps_branches_apart():
  m = np.asarray(masks.branch_mask(jnp.array([[0, 0, 1, 1, 2, 2]])))[0]
  np.testing.assert_array_equal(m[:, :2], np.ones((6, 2), bool))  # prefix
  np.testing.assert_array_equal(m[:2, 2:], np.zeros((2, 4), bool))
  assert m[2:4, 2:4].all() and m[4:, 4:].all()  # a branch sees itself
  assert not m[2:4, 4:].any() and not m[4:, 2:4].any()  # not the others


def test_combine_masks():
  a = jnp.array([[[True, False], [True, True]]])
  b = jnp.array([[[True, True], [False, True]]])
  np.testing.assert_array_equal(layers.combine_masks(a, None, b),
                                a & b)
  assert layers.combine_masks(None, None) is None


def _reference_attention(q, k, v, mask, bias, scale):
  logits = np.einsum("btnh,bsnh->bnts", q, k) * scale + bias
  logits = np.where(mask[:, None], logits, -np.inf)
  p = np.exp(logits - logits.max(-1, keepdims=True))
  p /= p.sum(-1, keepdims=True)
  return np.einsum("bnts,bsnh->btnh", p, v)


def test_attention_matches_numpy_and_xla_kernel():
  q, k, v = _qkv()
  mask = jax.random.bernoulli(KEY, 0.7, (2, 5, 6))
  mask = mask.at[:, :, 0].set(True)
  bias = jax.random.normal(jax.random.key(3), (1, 2, 5, 6))
  want = _reference_attention(*map(np.asarray, (q, k, v, mask, bias)), 0.3)
  for impl in ("einsum", "xla"):
    got = jax.jit(lambda q, k, v, m, b, impl=impl: layers.attention(
        q, k, v, mask=m, bias=b, scale=0.3, impl=impl))(q, k, v, mask, bias)
    np.testing.assert_allclose(got, want, atol=1e-5, err_msg=impl)


def test_attention_bf16_accumulates_close_to_f32():
  q, k, v = _qkv()
  f32 = layers.attention(q, k, v, impl="einsum")
  bf16 = layers.attention(q, k, v, dtype="bfloat16", impl="einsum")
  assert bf16.dtype == jnp.float32
  np.testing.assert_allclose(bf16, f32, atol=5e-2)
  assert not np.allclose(bf16, f32, atol=1e-7)  # bf16 really was used


def test_fully_masked_rows_stay_finite():
  q, k, v = _qkv()
  mask = jnp.zeros((2, 5, 6), bool)
  assert np.isfinite(np.asarray(layers.attention(q, k, v, mask=mask))).all()


def test_bad_inputs_get_clear_errors():
  q, k, v = _qkv()
  with pytest.raises(ValueError, match="impl"):
    layers.attention(q, k, v, impl="flash9")
  with pytest.raises(ValueError, match="dtype"):
    layers.compute_dtype("float16x")
  with pytest.raises(ValueError, match="activation"):
    layers.activation_fn("swishy")
  with pytest.raises(ValueError, match="integers"):
    layers.Embed(4, 2).init(KEY, jnp.ones((1, 2)))


@pytest.mark.parametrize("x_shape,k_shape,in_dims", [
    ((3, 5, 7), (7, 4), 1),          # [B, T, D] @ [D, F]
    ((2, 3, 4, 6), (4, 6, 9), 2),    # [B, T, N, H] @ [N, H, D]
    ((5, 7), (7, 3, 2), 1),          # [K, D] @ [D, N, H]
])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("devices", [1, 8])  # 1: through the CPU transpose
def test_dense_backward_is_autodiffs_product(x_shape, k_shape, in_dims,
                                             dtype, devices, monkeypatch):
  """`project`'s written-out backward gives autodiff's gradients."""
  monkeypatch.setattr(jax, "device_count", lambda: devices)
  x, k = (jax.random.normal(jax.random.key(i), s)
          for i, s in enumerate((x_shape, k_shape)))
  g = jax.random.normal(jax.random.key(2),
                        x_shape[:len(x_shape) - in_dims] + k_shape[in_dims:])
  cdtype = jnp.dtype(dtype)
  axes = (tuple(range(len(x_shape) - in_dims, len(x_shape))),
          tuple(range(in_dims)))

  def derived(x, k, *_):
    y = jax.lax.dot_general(x.astype(cdtype), k.astype(cdtype),
                            (axes, ((), ())), **layers.matmul_precision(cdtype))
    return y.astype(jnp.float32)

  def grads(fn):
    loss = lambda x, k: jnp.sum(jnp.sin(fn(x, k, in_dims, dtype)) * g)
    return jax.grad(loss, argnums=(0, 1))(x, k)

  got, want = grads(layers.project), grads(derived)
  np.testing.assert_array_equal(layers.project(x, k, in_dims, dtype),
                                derived(x, k))
  for a, b in zip(got, want):
    assert a.dtype == b.dtype == jnp.float32
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("x_shape", [(3, 5, 7), (4, 7)])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("devices", [1, 8])  # 1: through the CPU transpose
def test_unembed_backward_is_autodiffs_product(x_shape, dtype, devices,
                                               monkeypatch):
  """A tied head's written-out backward gives autodiff's gradients."""
  monkeypatch.setattr(jax, "device_count", lambda: devices)
  x = jax.random.normal(jax.random.key(0), x_shape)
  table = jax.random.normal(jax.random.key(1), (11, x_shape[-1]))
  g = jax.random.normal(jax.random.key(2), x_shape[:-1] + (11,))
  cdtype = jnp.dtype(dtype)

  def derived(x, t, *_):
    y = jnp.einsum("...d,vd->...v", x.astype(cdtype), t.astype(cdtype),
                   **layers.matmul_precision(cdtype))
    return y.astype(jnp.float32)

  def grads(fn):
    loss = lambda x, t: jnp.sum(jnp.sin(fn(x, t, dtype)) * g)
    return jax.grad(loss, argnums=(0, 1))(x, table)

  np.testing.assert_array_equal(layers.unembed(x, table, dtype),
                                derived(x, table))
  for a, b in zip(grads(layers.unembed), grads(derived)):
    assert a.dtype == b.dtype == jnp.float32
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_layernorm_and_rmsnorm_match_torch():
  x = jax.random.normal(KEY, (2, 3, 8)) * 3 + 1
  p = layers.LayerNorm(1e-5).init(KEY, x)
  want = torch.nn.functional.layer_norm(torch.tensor(np.asarray(x)), (8,),
                                        eps=1e-5).numpy()
  np.testing.assert_allclose(layers.LayerNorm(1e-5).apply(p, x), want,
                             atol=1e-5)
  rms = layers.RMSNorm(1e-6)
  got = rms.apply(rms.init(KEY, x), x)
  want = np.asarray(x) / np.sqrt((np.asarray(x) ** 2).mean(-1, keepdims=True)
                                 + 1e-6)
  np.testing.assert_allclose(got, want, rtol=1e-5)


def test_relative_bucket_matches_t5_reference():
  rel = np.arange(-300, 300)[None]
  for bidirectional in (True, False):
    want = modeling_t5.T5Attention._relative_position_bucket(  # pylint: disable=protected-access
        torch.tensor(rel), bidirectional=bidirectional, num_buckets=32,
        max_distance=128).numpy()
    got = layers.relative_position_bucket(
        jnp.asarray(rel), bidirectional=bidirectional, num_buckets=32,
        max_distance=128)
    np.testing.assert_array_equal(got, want)
  bias_mod = layers.RelativePositionBias(num_heads=3)
  pos = jnp.arange(5)[None]
  bias = bias_mod.apply(bias_mod.init(KEY, pos, pos), pos, pos)
  chex.assert_shape(bias, (1, 3, 5, 5))


def test_sinusoidal_codes():
  codes = layers.sinusoidal(jnp.arange(4)[None], 6)
  chex.assert_shape(codes, (1, 4, 6))
  np.testing.assert_allclose(codes[0, :, 0], np.sin(np.arange(4)), atol=1e-6)
  np.testing.assert_allclose(codes[0, 0, 3:], 1.0)


def test_gated_mlp_and_adapter_identity():
  x = jax.random.normal(KEY, (2, 3, 8))
  mlp = layers.Mlp(16, "gated_gelu_tanh", use_bias=False)
  p = mlp.init(KEY, x)["params"]
  assert set(p) == {"wi_0", "wi_1", "wo"}
  h = (jax.nn.gelu(x @ p["wi_0"]["kernel"].value, approximate=True)
       * (x @ p["wi_1"]["kernel"].value))
  np.testing.assert_allclose(mlp.apply({"params": p}, x),
                             h @ p["wo"]["kernel"].value, atol=1e-5)
  adapter = layers.Adapter(4)
  np.testing.assert_array_equal(adapter.apply(adapter.init(KEY, x), x), x)


CFG = blocks.BlockConfig(num_heads=2, head_dim=4, mlp_dim=16, adapter_dim=3)


def _stack_inputs():
  x = jax.random.normal(KEY, (2, 5, 8))
  mask = layers.segment_mask(jnp.array([[1, 1, 1, 2, 0], [1] * 5]))
  return x, mask


@pytest.mark.slow
def test_scan_stack_equals_unrolled_with_restacked_params():
  x, mask = _stack_inputs()
  flat = blocks.Stack(CFG, 3)
  p = jax.jit(flat.init)(KEY, x, mask)
  y, ys = jax.jit(flat.apply)(p, x, mask)
  assert len(ys) == 3
  unboxed = jax.tree.map(lambda b: b.value, p["params"],
                         is_leaf=lambda b: hasattr(b, "value"))
  scan = blocks.Stack(CFG, 3, scan=True, remat=True)
  y2, ys2 = jax.jit(scan.apply)({"params": blocks.restack(unboxed)}, x,
                                mask)
  np.testing.assert_allclose(y2, y, atol=1e-5)
  np.testing.assert_allclose(ys2[1], ys[1], atol=1e-5)
  boxed = jax.eval_shape(scan.init, KEY, x, mask)["params"]["layers"]["block"]
  assert boxed["mlp"]["wi"]["kernel"].names == ("layers", "embed", "mlp")


PAL = dataclasses.replace(CFG, adapter_dim=0, pal_dim=6, pal_heads=3,
                          dropout_rate=0.0, attention_dropout_rate=0.0)


def _unboxed(tree):
  return jax.tree.map(lambda b: b.value if hasattr(b, "value") else b, tree,
                      is_leaf=lambda b: hasattr(b, "value"))


def _by_hand(block, x, mask, pal):
  """A post-LN layer with a PAL: LN(x + SA(x) + V^D MHA(V^E x)), then the
  MLP sublayer; each piece applied alone from the block's params."""
  encoder, decoder = pal
  mha = lambda n, h, params, v: layers.MultiHeadAttention(n, h).apply(
      {"params": params}, v, mask=mask)
  norm = lambda params, v: layers.LayerNorm(epsilon=1e-12).apply(
      {"params": params}, v)
  beside = mha(3, 2, block["pal_attention"], x @ encoder) @ decoder
  h = norm(block["attention_norm"], x + mha(2, 4, block["attention"], x)
           + beside)
  return norm(block["mlp_norm"], h + layers.Mlp(16).apply(
      {"params": block["mlp"]}, h))


def test_pals_share_their_projections_across_layers():
  x, mask = _stack_inputs()
  stack = blocks.Stack(PAL, 3)
  p = _unboxed(stack.init(KEY, x, mask)["params"])
  assert set(p) == {"pal_encoder", "pal_decoder", "layer_0", "layer_1",
                    "layer_2"}
  assert p["pal_encoder"].shape == (8, 6) and p["pal_decoder"].shape == (6, 8)
  assert all("pal_attention" in p[f"layer_{i}"] and not any(
      "pal_encoder" in k or "pal_decoder" in k for k in p[f"layer_{i}"])
             for i in range(3))
  # V^D starts at zero: the stack computes what it computed without PALs.
  plain = blocks.Stack(dataclasses.replace(PAL, pal_dim=0), 3)
  without = {k: {n: v for n, v in p[k].items() if n != "pal_attention"}
             for k in p if k.startswith("layer_")}
  np.testing.assert_allclose(stack.apply({"params": p}, x, mask)[0],
                             plain.apply({"params": without}, x, mask)[0],
                             atol=1e-6)
  # Every layer reads the one shared pair.
  p["pal_decoder"] = jax.random.normal(jax.random.key(4), (6, 8))
  pair = (p["pal_encoder"], p["pal_decoder"])
  _, ys = stack.apply({"params": p}, x, mask)
  h = x
  for i in range(3):
    h = _by_hand(p[f"layer_{i}"], h, mask, pair)
    np.testing.assert_allclose(ys[i], h, atol=1e-5)
  scanned = blocks.Stack(PAL, 3, scan=True)
  _, ys2 = scanned.apply({"params": blocks.restack(p)}, x, mask)
  np.testing.assert_allclose(ys2[2], ys[2], atol=1e-5)
  with pytest.raises(ValueError, match="pal_dim 6 is not divisible"):
    blocks.Stack(dataclasses.replace(PAL, pal_heads=4), 1).init(KEY, x, mask)


def test_stack_layouts_restack_unstack_and_take_layers():
  layer = lambda i: {"w": np.full((2, 3), float(i)), "b": np.full(3, -i)}
  tree = {"embed": {"e": np.ones(4)},
          "encoder": {f"layer_{i}": layer(i) for i in range(4)},
          "decoder": {"inner": {f"layer_{i}": layer(10 + i) for i in range(4)}}}
  scanned = blocks.restack(tree)
  assert scanned["encoder"]["layers"]["block"]["w"].shape == (4, 2, 3)
  assert blocks.is_scanned(scanned) and not blocks.is_unrolled(scanned)
  assert blocks.is_unrolled(tree) and not blocks.is_scanned(tree)
  back = blocks.unstack(scanned)
  jax.tree.map(np.testing.assert_array_equal, back, tree)
  for source in (tree, scanned):
    cut = blocks.take_layers(source, [1, 3], scanned=False)
    assert sorted(cut["encoder"]) == ["layer_0", "layer_1"]
    assert cut["encoder"]["layer_1"]["w"][0, 0] == 3
    assert [cut["decoder"]["inner"][f"layer_{i}"]["w"][0, 0]
            for i in range(2)] == [11, 13]
    np.testing.assert_array_equal(cut["embed"]["e"], tree["embed"]["e"])
    cut_scanned = blocks.take_layers(source, [1, 3], scanned=True)
    np.testing.assert_array_equal(
        cut_scanned["encoder"]["layers"]["block"]["b"][:, 0], [-1, -3])
    assert [p["w"][0, 0] for p in blocks.first_stack(source)] == [0, 1, 2, 3]
  with pytest.raises(ValueError, match="no layer stack"):
    blocks.first_stack({"embed": {"e": np.ones(2)}})


@pytest.mark.slow
@pytest.mark.parametrize("policy", [True, "full", "dots"])
def test_remat_keeps_gradients_and_dropout_changes_output(policy):
  x, mask = _stack_inputs()
  rngs = {"dropout": jax.random.key(5)}
  plain, remat = blocks.Stack(CFG, 2), blocks.Stack(CFG, 2, remat=policy)
  p = jax.jit(plain.init)(KEY, x, mask)

  def run(module, params, deterministic=False):
    return module.apply(params, x, mask, deterministic=deterministic,
                        rngs=rngs)[0]

  @jax.jit
  def everything(params):
    # Post-LN outputs have a fixed norm, so the loss weighs them by x.
    grad = lambda m: jax.grad(lambda q: (run(m, q) * x).sum())(params)
    return grad(plain), grad(remat), run(plain, params, True), run(plain,
                                                                   params)

  g1, g2, det, drop = everything(p)
  chex.assert_trees_all_close(g1, g2, atol=1e-5)
  assert np.abs(det - drop).max() > 1e-4


def test_remat_policies_are_named():
  assert [blocks.remat_policy(v) for v in (False, True, "dots")] == [
      "none", "full", "dots"]
  with pytest.raises(ValueError, match="remat must be one of"):
    blocks.remat_policy("some")


def test_deep_stacks_scan_unless_told():
  assert not models.make_config("bert", "small").scan_layers   # 4 layers
  assert models.make_config("bert", "base").scan_layers        # 12
  assert not models.make_config("bert", "base",
                                scan_layers=False).scan_layers
  assert not models.make_config("albert", "base").scan_layers  # shared


def test_shared_stack_and_cross_attention_block():
  x, mask = _stack_inputs()
  shared = blocks.Stack(CFG, 4, shared=True)
  p = shared.init(KEY, x, mask)["params"]
  assert list(p) == ["layer"]
  cross = blocks.Block(blocks.BlockConfig(
      num_heads=2, head_dim=4, mlp_dim=16, pre_norm=True, norm="rmsnorm",
      use_bias=False, cross_attention=True))
  enc = jax.random.normal(KEY, (2, 7, 8))
  variables = cross.init(KEY, x, encoded=enc)
  assert "cross_attention" in variables["params"]
  chex.assert_shape(cross.apply(variables, x, encoded=enc), (2, 5, 8))
  with pytest.raises(ValueError, match="encoded"):
    cross.apply(variables, x)


def test_position_tables_can_start_sinusoidal():
  init = layers.position_init("sinusoidal")
  table = np.asarray(init(jax.random.key(0), (64, 32)))
  np.testing.assert_allclose(np.sqrt(np.mean(table ** 2)), 0.02, rtol=1e-3)
  codes = np.asarray(layers.sinusoidal(jnp.arange(64)[None], 32)[0])
  np.testing.assert_allclose(table, 0.02 * np.sqrt(2.0) * codes, rtol=1e-6)
  assert layers.position_init("normal") is layers.default_init
  with pytest.raises(ValueError, match="unknown position init"):
    layers.position_init("rotary")
