"""XLNet: parity with transformers (plain, two-stream, mems, token types),
export, packing, the model face, and mems without gradients."""

import dataclasses
import json
import pathlib

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
from zoo.models import xlnet
from zoo.models import blocks

# Reference configs: a tiny one (memory kept whole), and an odd one (3
# heads of 16, vocab 97, MLP 80, a mem_len shorter than a segment, a
# reuse_len, clamped distances, tanh gelu).
REFERENCES = {
    "small": dict(vocab_size=512, d_model=64, n_layer=2, n_head=4,
                  d_inner=128, mem_len=None),
    "odd": dict(vocab_size=97, d_model=48, n_layer=3, n_head=3, d_inner=80,
                mem_len=6, reuse_len=7, clamp_len=5,
                ff_activation="gelu_new"),
}
B, T = 2, 9


@dataclasses.dataclass
class Pair:
  """A reference model, its folder, and the zoo's conversion of it."""
  folder: str
  ref: transformers.XLNetLMHeadModel
  config: xlnet.Config
  params: dict
  fwd: callable  # jitted (params, tokens, **kw) -> zoo outputs


@pytest.fixture(scope="module", params=sorted(REFERENCES))
def pair(request, tmp_path_factory):
  torch.manual_seed(0)
  ref = transformers.XLNetLMHeadModel(transformers.XLNetConfig(
      **REFERENCES[request.param]))
  with torch.no_grad():  # biases and norms away from their init values
    for p in ref.parameters():
      p.add_(torch.randn_like(p) * 0.1)
  folder = hp.save(ref, tmp_path_factory.mktemp(request.param))
  ref = transformers.XLNetLMHeadModel.from_pretrained(
      folder, attn_implementation="eager").eval()
  family, config, params = convert.from_hf(folder)
  assert family == "xlnet"
  model = models.get(family).Model(config)
  fwd = jax.jit(lambda p, x, **kw: model.apply({"params": p}, x, **kw))
  return Pair(folder, ref, config, params, fwd)


def _rows(vocab, seed=0):
  """ids [B, T] (no pad id: 5), an attention mask with row 1 right-padded,
  token types."""
  rs = np.random.RandomState(seed)
  ids = rs.randint(7, vocab, (B, T))
  mask = np.ones((B, T), np.int64)
  mask[1, T - 3:] = 0
  return ids, mask, rs.randint(0, 2, (B, T))


def _torch(ref, ids, **kw):
  with torch.no_grad():
    return ref(torch.tensor(ids), output_hidden_states=True,
               **{k: torch.tensor(v) if isinstance(v, np.ndarray) else v
                  for k, v in kw.items()})


def _jnp(**kw):
  return {k: jnp.asarray(v) for k, v in kw.items()}


def _diff(ours, theirs, mask=None) -> float:
  diff = np.abs(np.asarray(ours) - theirs.detach().numpy())
  return float(diff[np.asarray(mask, bool)].max() if mask is not None
               else diff.max())


def test_plain_forward_matches_the_reference(pair):
  ids, mask, types = _rows(pair.config.vocab_size)
  theirs = _torch(pair.ref, ids, attention_mask=mask, token_type_ids=types)
  ours = pair.fwd(pair.params, jnp.asarray(ids),
                  **_jnp(segment_ids=mask, token_types=types))
  assert ours["logits"].shape == (B, T, pair.config.vocab_size)
  assert hp.max_diff(ours["logits"], theirs.logits, mask) <= hp.TOL
  assert len(ours["layers"]) == len(theirs.hidden_states)
  for a, b in zip(ours["layers"], theirs.hidden_states):
    assert _diff(a, b, mask) <= hp.TOL
  # Segments are relative: swapping A and B changes nothing; one type for
  # all changes the logits.
  run = lambda t: pair.fwd(pair.params, jnp.asarray(ids), **_jnp(
      segment_ids=mask, token_types=t))["logits"]
  np.testing.assert_allclose(run(1 - types), ours["logits"], atol=1e-6)
  assert np.abs(run(0 * types) - ours["logits"]).max() > 1e-3


TARGETS = np.array([[2, 5, 8], [0, 3, 4]])  # real pieces of both rows


def _permutation_inputs(seed=1):
  """perm_mask [B, T, T] of a random order per row (i may not see j at or
  after it in the order), target_mapping [B, 3, T] of TARGETS, and the
  order's ranks [B, T]. Some targets come first in their order, or see
  only padding: they may see no key at all."""
  rs = np.random.RandomState(seed)
  rank = np.stack([rs.permutation(T) for _ in range(B)])
  perm = (rank[:, None, :] >= rank[:, :, None]).astype(np.float32)
  return perm, np.eye(T, dtype=np.float32)[TARGETS], rank


def test_two_stream_forward_matches_the_reference(pair):
  ids, mask, types = _rows(pair.config.vocab_size)
  perm, tm, rank = _permutation_inputs()
  kw = dict(token_types=types, perm_mask=perm, target_mapping=tm)
  theirs = _torch(pair.ref, ids, attention_mask=mask, token_type_ids=types,
                  perm_mask=perm, target_mapping=tm)
  ours = pair.fwd(pair.params, jnp.asarray(ids),
                  **_jnp(segment_ids=mask, **kw))
  chex.assert_shape(ours["logits"], (B, 3, pair.config.vocab_size))
  assert _diff(ours["logits"], theirs.logits) <= hp.TOL
  # The reference interleaves the streams: h_0, g_0, h_1, g_1, ...
  for i, (h, g) in enumerate(zip(ours["layers"], ours["query_layers"])):
    assert _diff(h, theirs.hidden_states[2 * i], mask) <= hp.TOL
    assert _diff(g, theirs.hidden_states[2 * i + 1]) <= hp.TOL
  # A target sees its position, never its own token (the last in the
  # order: it sees keys, so it does not attend to all of them evenly).
  row = 0
  k = int(np.argmax(rank[row, TARGETS[row]]))
  at = TARGETS[row, k]
  other = ids.copy()
  other[row, at] = 7 if ids[row, at] != 7 else 8
  moved = pair.fwd(pair.params, jnp.asarray(other),
                   **_jnp(segment_ids=mask, **kw))["logits"]
  np.testing.assert_allclose(moved[row, k], ours["logits"][row, k],
                             atol=1e-5)
  assert np.abs(moved[row] - ours["logits"][row]).max() > 1e-4


def test_mems_carry_the_reference_memory(pair):
  """A padded first segment, then the next one reading its mems."""
  ids, mask, types = _rows(pair.config.vocab_size)
  ids2, _, _ = _rows(pair.config.vocab_size, seed=2)
  first = _torch(pair.ref, ids, attention_mask=mask, use_mems=True)
  second = _torch(pair.ref, ids2, mems=first.mems, token_type_ids=types,
                  use_mems=True)
  one = pair.fwd(pair.params, jnp.asarray(ids),
                 segment_ids=jnp.asarray(mask))
  two = pair.fwd(pair.params, jnp.asarray(ids2), mems=one["new_mems"],
                 token_types=jnp.asarray(types))
  for ours, theirs in ((one, first), (two, second)):
    assert len(ours["new_mems"]) == pair.config.num_layers
    for a, b in zip(ours["new_mems"], theirs.mems):  # theirs [M, B, D]
      assert _diff(a, b.transpose(0, 1)) <= hp.TOL
  assert _diff(two["logits"], second.logits) <= hp.TOL
  for a, b in zip(two["layers"], second.hidden_states):
    assert _diff(a, b) <= hp.TOL
  without = pair.fwd(pair.params, jnp.asarray(ids2),
                     token_types=jnp.asarray(types))  # no mems
  assert np.abs(without["logits"] - two["logits"]).max() > 1e-3
  want = min(pair.config.mem_len or 2 * T, 2 * T)
  assert two["new_mems"][0].shape == (B, want, pair.config.embed_dim)


def test_export_round_trip_is_bitwise_and_loads(pair, tmp_path):
  out = convert.to_hf(convert.from_hf(pair.folder), tmp_path / "out")
  before = load_file(f"{pair.folder}/model.safetensors")
  after = load_file(str(out / "model.safetensors"))
  assert before and set(before) <= set(after)
  for key, value in before.items():
    assert after[key].tobytes() == value.tobytes(), key
  read = lambda f: json.loads((pathlib.Path(f) / "config.json").read_text())
  want, got = read(pair.folder), read(out)
  for key in ("architectures", "d_model", "n_head", "d_head", "mem_len",
              "reuse_len", "clamp_len", "ff_activation", "pad_token_id"):
    assert got[key] == want[key], key
  exported = transformers.XLNetLMHeadModel.from_pretrained(
      str(out), attn_implementation="eager").eval()
  ids, mask, types = _rows(pair.config.vocab_size)
  theirs = _torch(exported, ids, attention_mask=mask, token_type_ids=types)
  ours = pair.fwd(pair.params, jnp.asarray(ids),
                  **_jnp(segment_ids=mask, token_types=types))
  assert hp.max_diff(ours["logits"], theirs.logits, mask) <= hp.TOL


def test_zoo_models_export_with_and_without_the_head(tmp_path):
  config = models.make_config("xlnet", "tiny", scan_layers=True)
  params = models.init_params("xlnet", config, jax.random.key(3))
  assert "layers" in params["encoder"]  # scanned params export unrolled
  bare = {k: v for k, v in params.items() if k != "lm_head"}
  model = models.get("xlnet").Model(config)
  ids, mask, _ = _rows(config.vocab_size)
  ours = model.apply({"params": params}, jnp.asarray(ids),
                     segment_ids=jnp.asarray(mask))
  for name, tree in (("head", params), ("bare", bare)):
    folder = convert.to_hf(("xlnet", config, tree), tmp_path / name)
    arch = json.loads((folder / "config.json").read_text())["architectures"]
    cls = getattr(transformers, arch[0])
    assert (cls is transformers.XLNetModel) == (name == "bare")
    theirs = _torch(cls.from_pretrained(str(folder)).eval(), ids,
                    attention_mask=mask)
    if name == "head":
      assert hp.max_diff(ours["logits"], theirs.logits, mask) <= hp.TOL
    assert _diff(ours["hidden"], theirs.hidden_states[-1], mask) <= hp.TOL
  with pytest.raises(ValueError, match="adapter_dim=4"):
    convert.to_hf(("xlnet", dataclasses.replace(config, adapter_dim=4), {}),
                  tmp_path / "adapters")


@pytest.fixture(scope="module")
def tiny():
  config, model = models.make("xlnet", "tiny", dropout_rate=0.0,
                              attention_dropout_rate=0.0)
  x = mc.tokens(batch=1, length=16, pad_tail=0)
  variables = fast_params(model, x)  # unit-scale weights: every term shows
  fwd = jax.jit(lambda v, x, **kw: model.apply(v, x, **kw))
  return config, model, variables, fwd


def test_packed_documents_match_separate_ones(tiny):
  _, _, variables, fwd = tiny
  x = mc.tokens(batch=1, length=16, pad_tail=0)
  seg = jnp.array([[1] * 10 + [2] * 6], jnp.int32)
  types = jnp.array([[0] * 4 + [1] * 6 + [0] * 3 + [1] * 3], jnp.int32)
  packed = fwd(variables, x, segment_ids=seg, token_types=types)
  # Positions restarting per document: the same distances inside each.
  restarted = fwd(variables, x, segment_ids=seg, token_types=types,
                  positions=transforms.positions_from_segments(seg))
  for lo, hi in ((0, 10), (10, 16)):
    alone = fwd(variables, x[:, lo:hi], token_types=types[:, lo:hi])
    for got in (packed, restarted):
      for a, b in zip(got["layers"], alone["layers"]):
        np.testing.assert_allclose(a[:, lo:hi], b, atol=2e-5)
  # logits_at: the content-stream logits at those positions only.
  at = jnp.array([[15, 0, 7]], jnp.int32)
  np.testing.assert_allclose(
      fwd(variables, x, segment_ids=seg, token_types=types,
          logits_at=at)["logits"],
      np.take_along_axis(np.asarray(packed["logits"]), at[..., None], 1),
      atol=1e-5)
  # Only distances count: shifted positions change nothing, spread ones do.
  arange = jnp.arange(16)[None]
  plain = fwd(variables, x)["hidden"]
  np.testing.assert_allclose(fwd(variables, x, positions=arange + 7)[
      "hidden"], plain, atol=2e-5)
  spread = fwd(variables, x, positions=arange * 2)["hidden"]
  assert np.abs(spread - plain).max() > 1e-3
  # A causal extra mask (clm on an encoder): no position sees its future.
  causal = jnp.tril(jnp.ones((1, 16, 16), bool))
  base = fwd(variables, x, mask=causal)["logits"]
  moved = fwd(variables, x.at[0, 6].set(11), mask=causal)["logits"]
  np.testing.assert_allclose(moved[0, :6], base[0, :6], atol=1e-5)
  assert np.abs(moved[0, 6:] - base[0, 6:]).max() > 1e-4


def test_outputs_axes_and_sharded_forward():
  config, model = models.make("xlnet", "tiny", adapter_dim=8)
  x = mc.tokens()
  variables = mc.init(model, x)
  paths = mc.check_logical_axes(variables)
  assert any("adapter" in p for p in paths)
  assert any("segment_embed" in p for p in paths)
  out = mc.sharded_equals_unsharded(model, variables, x)
  b, t, d = 4, 16, config.embed_dim
  chex.assert_shape(out["hidden"], (b, t, d))
  chex.assert_shape(out["logits"], (b, t, config.vocab_size))
  assert len(out["layers"]) == config.num_layers + 1
  chex.assert_shape(list(out["layers"]) + list(out["new_mems"]), (b, t, d))
  assert len(out["new_mems"]) == config.num_layers
  assert models.interface_of("xlnet", config) == "encoder"
  chex.assert_tree_all_finite(out)


def test_scan_remat_and_bf16_match_the_unrolled_f32_model(tiny):
  config, model, variables, fwd = tiny
  x = mc.tokens(batch=B, length=T, pad_tail=0)
  perm, tm, _ = _permutation_inputs()
  kw = _jnp(perm_mask=perm, target_mapping=tm)
  mems = fwd(variables, x)["new_mems"]
  ref = fwd(variables, x, mems=mems, **kw)
  scanned = models.get("xlnet").Model(dataclasses.replace(
      config, scan_layers=True, remat="full"))
  stacked = {"params": blocks.restack(nn.meta.unbox(variables["params"]))}
  boxed = jax.eval_shape(scanned.init, jax.random.key(0), x)
  assert boxed["params"]["encoder"]["layers"]["block"]["mlp"]["wi"][
      "kernel"].names == ("layers", "embed", "mlp")
  dots = models.get("xlnet").Model(dataclasses.replace(config, remat="dots"))
  for other, v in ((scanned, stacked), (dots, variables)):
    got = jax.jit(lambda v, m=other: m.apply(v, x, mems=mems, **kw))(v)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5),
                 got, ref)
  bf16 = models.get("xlnet").Model(dataclasses.replace(config,
                                                       dtype="bfloat16"))
  low = jax.jit(lambda v: bf16.apply(v, x, **kw))(variables)["logits"]
  assert low.dtype == jnp.float32
  np.testing.assert_allclose(low, fwd(variables, x, **kw)["logits"],
                             atol=0.1)


def test_new_mems_carry_no_gradient(tiny):
  _, model, variables, _ = tiny
  x1, x2 = mc.tokens(batch=B, length=T, seed=1), mc.tokens(batch=B, length=T,
                                                           seed=2)

  def loss(params, stop):
    mems = model.apply({"params": params}, x1)["new_mems"]
    mems = jax.lax.stop_gradient(mems) if stop else mems
    out = model.apply({"params": params}, x2, mems=mems)
    return jnp.sum(out["logits"] ** 2) * 1e-3

  params = variables["params"]
  through, stopped = (jax.jit(jax.grad(loss), static_argnums=1)(params, s)
                      for s in (False, True))
  jax.tree.map(lambda a, b: np.testing.assert_array_equal(a, b), through,
               stopped)
  # The mems do reach the loss: the first call's tokens change it.
  other = lambda p: loss(p, True)
  assert float(other(params)) != float(jax.jit(
      lambda p: jnp.sum(model.apply({"params": p}, x2)["logits"] ** 2)
      * 1e-3)(params))


def test_unsupported_settings_and_bad_inputs_are_refused(tiny, tmp_path):
  config, model, variables, _ = tiny
  with pytest.raises(ValueError, match="bi_data"):
    models.make_config("xlnet", "tiny", bi_data=True)
  with pytest.raises(ValueError, match="attn_type 'uni'"):
    convert.xlnet.make_config(dict(attn_type="uni"))
  x = mc.tokens(batch=B, length=T)
  tm = jnp.zeros((B, 2, T))
  with pytest.raises(ValueError, match="not both"):
    model.apply(variables, x, target_mapping=tm,
                logits_at=jnp.zeros((B, 2), jnp.int32))
  with pytest.raises(ValueError, match="perm_mask"):
    model.apply(variables, x, perm_mask=jnp.zeros((B, T, T + 1)))
  with pytest.raises(ValueError, match="mems must be 2 arrays"):
    model.apply(variables, x, mems=[jnp.zeros((B, 3, config.embed_dim))])
  with pytest.raises(ValueError, match="head_dim"):
    convert.to_hf(("xlnet", dataclasses.replace(config, head_dim=8), {}),
                  tmp_path)


@pytest.mark.parametrize("scheme", ["mlm", "clm"])
def test_encoder_schemes_train_xlnet(scheme):
  """The encoder contract (positions, logits_at, a causal mask), traced
  with dropout on."""
  obj = oc.build(scheme, "xlnet", model_args=dict(
      dropout_rate=0.1, attention_dropout_rate=0.1))
  batch = oc.tiny_batch(seq_len=32, batch_size=2)
  params = jax.eval_shape(obj.init, jax.random.key(0), batch)
  grads = jax.eval_shape(
      jax.grad(lambda p: obj.loss(p, batch, jax.random.key(1))[0]), params)
  assert jax.tree.structure(grads) == jax.tree.structure(params)
