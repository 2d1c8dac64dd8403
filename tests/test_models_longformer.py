"""Longformer: blocked windows equal dense band attention, parity with
transformers (masked LM and bare model, global tokens, lengths padded to
the window), export, packing, the model face, the mlm scheme, and refused
settings."""

import dataclasses
import json
import pathlib
import re

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from safetensors.numpy import load_file

from objectives import transforms
from tests import hf_parity as hp
from tests import model_checks as mc
from tests import objective_checks as oc
from tests.fast_params import fast_params
from zoo import convert, models
from zoo.models import longformer
from zoo.models import blocks

# Reference configs, each with a length that is no multiple of its window
# (the reference pads to one): a small one, and an odd one (3 heads of 12,
# vocab 97, MLP 80, 3 layers, window 6, token types, tanh gelu).
REFERENCES = {
    "small": (dict(vocab_size=512, hidden_size=64, num_hidden_layers=2,
                   num_attention_heads=4, intermediate_size=128,
                   attention_window=8, max_position_embeddings=66,
                   type_vocab_size=1, layer_norm_eps=1e-5), 20),
    "odd": (dict(vocab_size=97, hidden_size=36, num_hidden_layers=3,
                 num_attention_heads=3, intermediate_size=80,
                 attention_window=6, max_position_embeddings=40,
                 type_vocab_size=2, hidden_act="gelu_new",
                 layer_norm_eps=1e-5), 13),
}
B = 2


@dataclasses.dataclass
class Pair:
  """Reference models, their folders, and the zoo's conversions."""
  name: str
  length: int
  folder: str  # LongformerForMaskedLM
  bare_folder: str  # LongformerModel (with its pooler)
  ref: transformers.LongformerForMaskedLM
  bare: transformers.LongformerModel
  config: longformer.Config
  params: dict
  bare_params: dict
  fwd: callable  # jitted (params, tokens, **kw) -> zoo outputs


@pytest.fixture(scope="module", params=sorted(REFERENCES))
def pair(request, tmp_path_factory):
  hf, length = REFERENCES[request.param]
  torch.manual_seed(0)
  ref = transformers.LongformerForMaskedLM(transformers.LongformerConfig(**hf))
  with torch.no_grad():  # biases and norms away from their init values
    for p in ref.parameters():
      p.add_(torch.randn_like(p) * 0.1)
  folder = hp.save(ref, tmp_path_factory.mktemp(request.param))
  bare = transformers.LongformerModel.from_pretrained(folder)  # + a pooler
  bare_folder = hp.save(bare, tmp_path_factory.mktemp(request.param + "_m"))
  family, config, params = convert.from_hf(folder)
  assert family == "longformer"
  _, bare_config, bare_params = convert.from_hf(bare_folder)
  assert bare_config == config
  model = models.get(family).Model(config)
  fwd = jax.jit(lambda p, x, **kw: model.apply({"params": p}, x, **kw))
  return Pair(request.param, length, folder, bare_folder,
              transformers.LongformerForMaskedLM.from_pretrained(folder).eval(),
              bare.eval(), config, params, bare_params, fwd)


def _rows(vocab, length, seed=0):
  """ids [B, T] (pad id 1 on row 1's last 4), its 0/1 mask, token types
  and a global mask (row 0: two tokens; row 1: its first and a pad)."""
  rs = np.random.RandomState(seed)
  ids = rs.randint(3, vocab, (B, length))
  mask = np.ones((B, length), np.int64)
  mask[1, length - 4:] = 0
  ids[1, length - 4:] = 1
  glob = np.zeros((B, length), np.int64)
  glob[0, [0, length // 2]] = 1
  glob[1, [0, length - 1]] = 1
  return ids, mask, rs.randint(0, 2, (B, length)), glob


def _call(pair, ids, mask, types, glob):
  """(torch kwargs, zoo kwargs) of one set of inputs."""
  theirs = dict(attention_mask=torch.tensor(mask))
  ours = dict(segment_ids=jnp.asarray(mask, jnp.int32))
  if pair.config.type_vocab_size > 1:
    theirs["token_type_ids"] = torch.tensor(types)
    ours["token_types"] = jnp.asarray(types, jnp.int32)
  if glob is not None:
    theirs["global_attention_mask"] = torch.tensor(glob)
    ours["global_mask"] = jnp.asarray(glob, bool)
  return theirs, ours


@pytest.mark.parametrize("short", [False, True])
def test_masked_lm_matches_the_reference(pair, short):
  """Logits and every layer, with and without global tokens; `short`: 5
  pieces, fewer than the one-sided window (one block)."""
  length = 5 if short else pair.length
  ids, mask, types, glob = _rows(pair.config.vocab_size, length)
  for g in (None, glob):
    kw_t, kw_z = _call(pair, ids, mask, types, g)
    with torch.no_grad():
      theirs = pair.ref(torch.tensor(ids), output_hidden_states=True, **kw_t)
    ours = pair.fwd(pair.params, jnp.asarray(ids), **kw_z)
    assert ours["logits"].shape == (B, length, pair.config.vocab_size)
    diffs = [hp.max_diff(ours["logits"], theirs.logits, mask)]
    assert len(ours["layers"]) == len(theirs.hidden_states)
    diffs += [hp.max_diff(a, b, mask)
              for a, b in zip(ours["layers"], theirs.hidden_states)]
    print(pair.name, "mlm", length, "global" if g is not None else "local",
          max(diffs))
    assert max(diffs) <= hp.TOL


def test_bare_model_matches_the_reference(pair):
  ids, mask, types, glob = _rows(pair.config.vocab_size, pair.length, seed=1)
  model = models.get("longformer").Model(pair.config)
  for g in (None, glob):
    kw_t, kw_z = _call(pair, ids, mask, types, g)
    with torch.no_grad():
      theirs = pair.bare(torch.tensor(ids), **kw_t)
    ours = model.apply({"params": pair.bare_params}, jnp.asarray(ids), **kw_z)
    diffs = (hp.max_diff(ours["hidden"], theirs.last_hidden_state, mask),
             float(np.abs(ours["pooled"] - theirs.pooler_output.numpy()).max()))
    print(pair.name, "model", "global" if g is not None else "local", diffs)
    assert max(diffs) <= hp.TOL


def test_export_round_trip_is_bitwise_and_loads(pair, tmp_path):
  out = convert.to_hf(convert.from_hf(pair.folder), tmp_path / "out")
  before = load_file(f"{pair.folder}/model.safetensors")
  after = load_file(str(out / "model.safetensors"))
  assert before and set(before) <= set(after)
  for key, value in before.items():
    assert after[key].tobytes() == value.tobytes(), key
  read = lambda f: json.loads((pathlib.Path(f) / "config.json").read_text())
  want, got = read(pair.folder), read(out)
  for key in ("architectures", "hidden_size", "num_attention_heads",
              "attention_window", "hidden_act", "type_vocab_size",
              "pad_token_id", "max_position_embeddings"):
    assert got[key] == want[key], key


def test_zoo_models_export_and_dilation_is_refused(tmp_path):
  config = models.make_config("longformer", "tiny", attention_window=4,
                              max_global=3)
  assert config.pad_id == 0 and config.position_offset == 2
  params = models.init_params("longformer", config, jax.random.key(3))
  model = models.get("longformer").Model(config)
  ids, mask, _, glob = _rows(config.vocab_size, 11)
  ids[1, -4:] = 0
  ours = model.apply({"params": params}, jnp.asarray(ids),
                     segment_ids=jnp.asarray(mask),
                     global_mask=jnp.asarray(glob, bool))
  folder = convert.to_hf(("longformer", config, params), tmp_path / "mlm")
  ref = transformers.LongformerForMaskedLM.from_pretrained(str(folder)).eval()
  with torch.no_grad():
    theirs = ref(torch.tensor(ids), attention_mask=torch.tensor(mask),
                 global_attention_mask=torch.tensor(glob))
  assert hp.max_diff(ours["logits"], theirs.logits, mask) <= hp.TOL
  with pytest.raises(ValueError, match="attention_dilation=2"):
    convert.to_hf(("longformer", dataclasses.replace(
        config, attention_dilation=2), params), tmp_path / "dilated")


# ------------------------------------------------ windows vs dense masks ---


def _dense_reference(p, x, seg, glob, radius, dilation):
  """The attention layer with T x T masks: a token reads its window and
  the global tokens of its document; a global token reads its document."""
  def proj(name, h):
    return (jnp.einsum("btd,dnh->btnh", h, p[name]["kernel"])
            + p[name]["bias"])
  t = x.shape[1]
  i, j = np.arange(t)[:, None], np.arange(t)[None]
  band = (np.abs(i - j) <= radius * dilation) & ((i - j) % dilation == 0)
  same = (seg[:, :, None] == seg[:, None, :]) & (seg[:, None, :] != 0)
  g = glob & (seg != 0)
  attend = lambda q, k, v, m: nn.dot_product_attention(
      q, k, v, mask=m[:, None], precision="highest")
  local = attend(proj("query", x), proj("key", x), proj("value", x),
                 same & (band[None] | g[:, None, :]))
  wide = attend(proj("query_global", x), proj("key_global", x),
                proj("value_global", x), same)
  out = jnp.where(g[:, :, None, None], wide, local)
  return jnp.einsum("btnh,nhd->btd", out, p["out"]["kernel"]) + p[
      "out"]["bias"]


@pytest.mark.parametrize("radius,dilation", [(2, 1), (2, 2), (3, 3), (24, 1)])
def test_blocked_window_equals_dense_band_attention(radius, dilation):
  """Packed documents, padding, global tokens (one on padding, ignored);
  radius 24 > T: one block."""
  config = models.make_config("longformer", "tiny", embed_dim=16,
                              num_heads=2, attention_window=2 * radius,
                              attention_dilation=dilation)
  t = 21
  x = jnp.asarray(np.random.RandomState(0).randn(B, t, 16), jnp.float32)
  seg = np.array([[1] * 9 + [2] * 8 + [0] * 4, [3] * 21])
  glob = np.zeros((B, t), bool)
  glob[0, [0, 10, 12, 19]] = True
  glob[1, [4]] = True
  attn = longformer.Attention(config)
  ctx = lambda g: longformer.make_context(x[..., 0], config, jnp.asarray(seg),
                                          g)
  params = nn.meta.unbox(fast_params(attn, x, ctx(None))["params"])
  run = jax.jit(lambda p, g: attn.apply({"params": p}, x, ctx(g)))
  real = seg != 0
  for g in (np.zeros_like(glob), glob):
    want = _dense_reference(params, x, seg, g, radius, dilation)
    got = run(params, None if not g.any() else jnp.asarray(g))
    np.testing.assert_allclose(np.asarray(got)[real], np.asarray(want)[real],
                               atol=2e-5)


def test_no_intermediate_is_quadratic_in_length():
  """The largest array of the compiled forward and gradient (window 8, a
  global token every 200) doubles, no more, when T does: O(T * w)."""
  _, model = models.make("longformer", "tiny", num_layers=1,
                         attention_window=8, max_len=2050)

  def largest(t):
    x = jnp.ones((1, t), jnp.int32)
    glob = jnp.zeros((1, t), bool).at[0, ::200].set(True)
    loss = lambda p: model.apply(p, x, global_mask=glob, return_logits=False)[
        "hidden"].sum()
    params = jax.eval_shape(model.init, jax.random.key(0), x)
    text = jax.jit(jax.grad(loss)).lower(params).as_text()
    return max(int(np.prod([int(d) for d in m.split("x")[:-1]]))
               for m in re.findall(r"tensor<((?:\d+x)+)\w+>", text))

  small, big = largest(1024), largest(2048)
  assert big <= 2 * small < 1024 * 1024, (small, big)


def test_extra_global_tokens_stay_local_under_jit():
  seg = jnp.ones((1, 12), jnp.int32)
  glob = jnp.zeros((1, 12), bool).at[0, jnp.array([1, 4, 7])].set(True)
  is_global, slots, ok = jax.jit(
      lambda g: longformer.global_slots(g, seg, 2))(glob)
  np.testing.assert_array_equal(slots, [[1, 4]])
  assert bool(ok.all()) and int(is_global.sum()) == 2 and not is_global[0, 7]


# ------------------------------------------------------- the model face ---


@pytest.fixture(scope="module")
def tiny():
  config, model = models.make("longformer", "tiny", dropout_rate=0.0,
                              attention_dropout_rate=0.0, attention_window=4)
  x = mc.tokens(batch=1, length=24, pad_tail=0)
  variables = fast_params(model, x)
  fwd = jax.jit(lambda v, x, **kw: model.apply(v, x, **kw))
  return config, model, variables, fwd


def test_packed_documents_match_separate_ones(tiny):
  _, _, variables, fwd = tiny
  x = mc.tokens(batch=1, length=24, pad_tail=0)
  seg = jnp.array([[1] * 11 + [2] * 9 + [0] * 4], jnp.int32)
  glob = jnp.zeros((1, 24), bool).at[0, jnp.array([0, 13])].set(True)
  packed = fwd(variables, x, segment_ids=seg, global_mask=glob,
               positions=transforms.positions_from_segments(seg))
  for lo, hi, at in ((0, 11, 0), (11, 20, 2)):
    alone = fwd(variables, x[:, lo:hi],
                global_mask=jnp.zeros((1, hi - lo), bool).at[0, at].set(True))
    for a, b in zip(packed["layers"], alone["layers"]):
      np.testing.assert_allclose(a[:, lo:hi], b, atol=2e-5)
  # Globals matter: without them the first document reads otherwise.
  plain = fwd(variables, x, segment_ids=seg,
              positions=transforms.positions_from_segments(seg))
  assert np.abs(plain["hidden"][0, :11] - packed["hidden"][0, :11]).max() > 1e-3
  at = jnp.array([[23, 0, 7]], jnp.int32)
  np.testing.assert_allclose(
      fwd(variables, x, segment_ids=seg, global_mask=glob, logits_at=at,
          positions=transforms.positions_from_segments(seg))["logits"],
      np.take_along_axis(np.asarray(packed["logits"]), at[..., None], 1),
      atol=1e-5)


def test_outputs_axes_and_sharded_forward():
  config, model = models.make("longformer", "tiny", adapter_dim=8)
  x = mc.tokens()  # [4, 16], window 16: two blocks of 8
  glob = jnp.zeros(x.shape, bool).at[:, 0].set(True).at[1, 9].set(True)
  variables = mc.init(model, x)
  paths = mc.check_logical_axes(variables)
  assert any("adapter" in p for p in paths)
  assert any("key_global" in p for p in paths)
  for kw in ({}, {"global_mask": glob}):
    out = mc.sharded_equals_unsharded(model, variables, x, **kw)
    b, t, d = 4, 16, config.embed_dim
    chex.assert_shape(out["hidden"], (b, t, d))
    chex.assert_shape(out["logits"], (b, t, config.vocab_size))
    chex.assert_shape(out["pooled"], (b, d))
    assert len(out["layers"]) == config.num_layers + 1
    chex.assert_tree_all_finite(out)
  assert models.interface_of("longformer", config) == "encoder"


def test_scan_remat_and_bf16_match_the_unrolled_f32_model(tiny):
  config, model, variables, fwd = tiny
  x = mc.tokens(batch=B, length=24, pad_tail=5)
  glob = jnp.zeros(x.shape, bool).at[:, 3].set(True)
  ref = fwd(variables, x, global_mask=glob)
  scanned = models.get("longformer").Model(dataclasses.replace(
      config, scan_layers=True, remat="full"))
  stacked = {"params": blocks.restack(nn.meta.unbox(variables["params"]))}
  boxed = jax.eval_shape(scanned.init, jax.random.key(0), x)
  assert boxed["params"]["encoder"]["layers"]["block"]["attention"][
      "query_global"]["kernel"].names == ("layers", "embed", "heads", "kv")
  got = jax.jit(lambda v: scanned.apply(v, x, global_mask=glob))(stacked)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5),
               got, ref)
  bf16 = models.get("longformer").Model(dataclasses.replace(
      config, dtype="bfloat16"))
  low = jax.jit(lambda v: bf16.apply(v, x, global_mask=glob))(variables)
  assert low["logits"].dtype == jnp.float32
  np.testing.assert_allclose(low["hidden"], ref["hidden"], atol=0.1)


def test_mlm_scheme_trains_longformer():
  """Rows of 48 with a window of 8: six blocks; dropout on."""
  obj = oc.build("mlm", "longformer", model_args=dict(
      attention_window=8, dropout_rate=0.1, attention_dropout_rate=0.1))
  oc.check(obj, oc.tiny_batch(seq_len=48, batch_size=4))


def test_bad_settings_and_inputs_are_refused(tiny):
  for kw, words in ((dict(attention_window=7), "positive even"),
                    (dict(attention_window=0), "positive even"),
                    (dict(attention_dilation=0), "attention_dilation"),
                    (dict(max_global=0), "max_global"),
                    (dict(num_heads=3), "divisible")):
    with pytest.raises(ValueError, match=words):
      models.make_config("longformer", "tiny", **kw)
  with pytest.raises(ValueError, match="differs between layers"):
    convert.longformer.attention_window(dict(attention_window=[4, 8]))
  assert convert.longformer.attention_window(
      dict(attention_window=[6, 6])) == 6
  config, model, variables, _ = tiny
  x = mc.tokens(batch=1, length=12)
  with pytest.raises(ValueError, match="dense"):
    model.apply(variables, x, mask=jnp.ones((1, 12, 12), bool))
  with pytest.raises(ValueError, match="global_mask"):
    model.apply(variables, x, global_mask=jnp.ones((1, 11), bool))
  with pytest.raises(ValueError, match="max_global=8"):
    model.apply(variables, x, global_mask=jnp.ones((1, 12), bool))
  long = mc.tokens(batch=1, length=config.max_len)
  with pytest.raises(ValueError, match="max_len"):
    model.apply(variables, long)
