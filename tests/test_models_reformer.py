"""Reformer: LSH and local attention against dense attention, reversible
gradients against plain autodiff (and memory flat in depth), parity with
transformers (LM and bare model, the reference's rotations passed in),
export, the model face, the clm scheme, and refused settings."""

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

from tests import hf_parity as hp
from tests import model_checks as mc
from tests import objective_checks as oc
from zoo import convert, models
from zoo.convert import reformer as reformer_convert
from zoo.models import lsh, reformer, reversible
from zoo.models import blocks

# Reference configs (causal LMs), each with a length the reference pads to
# its chunks: a small one (local and LSH twice each, two hash rounds, a
# position table), and an odd one (hidden 27 of 3 heads of 7, three hash
# rounds, factorised buckets, axial positions, chunked feed-forward, gelu,
# LSH chunks of 6 and local ones of 4: rows padded to a multiple of 12).
REFERENCES = {
    "small": (dict(vocab_size=64, hidden_size=32, num_attention_heads=2,
                   attention_head_size=16, feed_forward_size=64,
                   attn_layers=["local", "lsh", "local", "lsh"],
                   local_attn_chunk_length=4, lsh_attn_chunk_length=4,
                   num_buckets=4, num_hashes=2, axial_pos_embds=False,
                   max_position_embeddings=64, hash_seed=3), 22),
    "odd": (dict(vocab_size=97, hidden_size=27, num_attention_heads=3,
                 attention_head_size=7, feed_forward_size=50,
                 attn_layers=["local", "lsh"], local_attn_chunk_length=4,
                 lsh_attn_chunk_length=6, num_buckets=[2, 4], num_hashes=3,
                 axial_pos_shape=[6, 8], axial_pos_embds_dim=[10, 17],
                 max_position_embeddings=48, hash_seed=5, hidden_act="gelu",
                 layer_norm_eps=1e-5, chunk_size_feed_forward=4), 25),
}
B = 2


def reference_rotations(config: reformer.Config, seed: int) -> jax.Array:
  """The rotations the reference's LSH layers draw with `hash_seed=seed`
  (each layer reseeds torch, then draws [N, H, R, K/2] standard normals)."""
  torch.manual_seed(seed)
  return jnp.asarray(torch.randn(reformer.rotation_shape(config)).numpy())


@dataclasses.dataclass
class Pair:
  """A reference model, its folders, and the zoo's conversion."""
  name: str
  length: int
  folder: str  # ReformerModelWithLMHead
  bare_folder: str  # ReformerModel
  ref: transformers.ReformerModelWithLMHead
  bare: transformers.ReformerModel
  config: reformer.Config
  params: dict
  bare_params: dict
  rotations: jax.Array
  fwd: callable  # jitted (params, tokens, **kw) -> zoo outputs


@pytest.fixture(scope="module", params=sorted(REFERENCES))
def pair(request, tmp_path_factory):
  hf, length = REFERENCES[request.param]
  torch.manual_seed(0)
  ref = transformers.ReformerModelWithLMHead(
      transformers.ReformerConfig(is_decoder=True, **hf))
  with torch.no_grad():  # biases and norms away from their init values
    for p in ref.parameters():
      p.add_(torch.randn_like(p) * 0.1)
  folder = hp.save(ref, tmp_path_factory.mktemp(request.param))
  bare = transformers.ReformerModel.from_pretrained(folder)
  bare_folder = hp.save(bare, tmp_path_factory.mktemp(request.param + "_m"))
  family, config, params = convert.from_hf(folder)
  assert family == "reformer"
  _, bare_config, bare_params = convert.from_hf(bare_folder)
  assert bare_config == config
  model = models.get(family).Model(config)
  fwd = jax.jit(lambda p, x, **kw: model.apply({"params": p}, x, **kw))
  return Pair(request.param, length, folder, bare_folder,
              transformers.ReformerModelWithLMHead.from_pretrained(
                  folder).eval(), bare.eval(), config, params, bare_params,
              reference_rotations(config, hf["hash_seed"]), fwd)


def _rows(vocab, length, seed=0):
  """ids [B, T] (pad id 0 on row 1's last 3) and its 0/1 mask."""
  return hp.padded_ids(vocab, 0, (B, length), seed)


@pytest.mark.parametrize("short", [False, True])
def test_lm_matches_the_reference(pair, short):
  """Logits and every layer's stream; `short`: 4 pieces, no longer than
  the shortest chunk (dense attention, no hashing, no padding)."""
  length = 4 if short else pair.length
  ids, mask = _rows(pair.config.vocab_size, length)
  with torch.no_grad():
    theirs = pair.ref(torch.tensor(ids), attention_mask=torch.tensor(mask),
                      output_hidden_states=True)
  ours = pair.fwd(pair.params, jnp.asarray(ids),
                  segment_ids=jnp.asarray(mask, jnp.int32),
                  rotations=pair.rotations)
  assert ours["logits"].shape == (B, length, pair.config.vocab_size)
  assert len(ours["layers"]) == len(theirs.hidden_states)
  diffs = [hp.max_diff(ours["logits"], theirs.logits, mask)]
  diffs += [hp.max_diff(a, b[:, :length], mask)  # theirs: padded rows
            for a, b in zip(ours["layers"], theirs.hidden_states)]
  print(pair.name, "lm", length, max(diffs))
  assert max(diffs) <= hp.TOL


def test_bare_model_matches_the_reference(pair):
  ids, mask = _rows(pair.config.vocab_size, pair.length, seed=1)
  with torch.no_grad():
    theirs = pair.bare(torch.tensor(ids), attention_mask=torch.tensor(mask))
  ours = pair.fwd(pair.bare_params, jnp.asarray(ids),
                  segment_ids=jnp.asarray(mask, jnp.int32),
                  rotations=pair.rotations)
  assert ours["hidden"].shape == (B, pair.length, 2 * pair.config.embed_dim)
  diff = hp.max_diff(ours["hidden"], theirs.last_hidden_state, mask)
  print(pair.name, "model", diff)
  assert diff <= hp.TOL


def test_export_round_trip_is_bitwise_and_loads(pair, tmp_path):
  out = convert.to_hf(convert.from_hf(pair.folder), tmp_path / "out")
  before = load_file(f"{pair.folder}/model.safetensors")
  after = load_file(str(out / "model.safetensors"))
  assert before and set(before) <= set(after)
  for key, value in before.items():
    if key != "lm_head.bias":  # the reference's forward never reads it
      assert after[key].tobytes() == value.tobytes(), key
  read = lambda f: json.loads((pathlib.Path(f) / "config.json").read_text())
  want, got = read(pair.folder), read(out)
  for key in ("architectures", "hidden_size", "attention_head_size",
              "attn_layers", "num_buckets", "num_hashes", "axial_pos_embds",
              "hidden_act", "lsh_attn_chunk_length", "local_attn_chunk_length",
              "chunk_size_feed_forward", "max_position_embeddings"):
    assert got.get(key) == want.get(key), key


def test_zoo_models_export_and_the_reference_reads_them(tmp_path):
  config = models.make_config("reformer", "tiny", num_layers=4)
  params = models.init_params("reformer", config, jax.random.key(3))
  params = jax.tree.map(  # away from init: unit-scale tables, offsets
      lambda p: p + 0.1 * jax.random.normal(jax.random.key(4), p.shape),
      params)
  folder = convert.to_hf(("reformer", config, params), tmp_path / "lm")
  ref = transformers.ReformerModelWithLMHead.from_pretrained(
      str(folder), hash_seed=11).eval()
  ids, mask = _rows(config.vocab_size, 20)
  with torch.no_grad():
    theirs = ref(torch.tensor(ids), attention_mask=torch.tensor(mask))
  ours = models.get("reformer").Model(config).apply(
      {"params": params}, jnp.asarray(ids), segment_ids=jnp.asarray(mask),
      rotations=reference_rotations(config, 11))
  diff = hp.max_diff(ours["logits"], theirs.logits, mask)
  print("zoo -> hf", diff)
  assert diff <= hp.TOL
  # How the zoo differentiates is no part of the reference's config.
  again = convert.to_hf(("reformer", dataclasses.replace(
      config, reversible=False), params), tmp_path / "plain")
  assert (again / "config.json").read_text() == (
      folder / "config.json").read_text()


# ------------------------------------------------- attention vs dense ---


def _dense_reference(q, k, v, seg, self_masked):
  """Causal attention over the whole row, documents apart; with
  `self_masked` a query reads itself only when nothing else is visible."""
  t = q.shape[1]
  logits = jnp.einsum("btnh,bsnh->bnts", q, k, precision="highest")
  i, j = np.arange(t)[:, None], np.arange(t)[None]
  ok = (seg[:, :, None] == seg[:, None, :]) & (seg[:, None, :] != 0) & (
      j <= i)[None]
  logits = jnp.where(ok[:, None], logits, lsh.MASK_VALUE)
  if self_masked:
    logits = jnp.where((i == j)[None, None], lsh.SELF_VALUE, logits)
  probs = jax.nn.softmax(logits, axis=-1)
  return jnp.einsum("bnts,bsnh->btnh", probs, v, precision="highest")


def _qkv(t=16, n=2, h=8):
  rs = np.random.RandomState(0)
  q, k, v = (jnp.asarray(rs.randn(B, t, n, h), jnp.float32) for _ in "qkv")
  seg = jnp.asarray([[1] * 7 + [2] * 6 + [0] * 3, [3] * t], jnp.int32)
  return q, k, v, seg


@pytest.mark.parametrize("rounds", [1, 3])
def test_lsh_with_one_bucket_equals_dense_causal_attention(rounds):
  """Zero rotations put every piece in one bucket (ties: the first), the
  sorted order is the row's, and with chunks of 4 reading 3 before, every
  query's chunks hold its whole past: identical rounds, combined by their
  log-sum-exp, are dense causal attention (packed documents, padding)."""
  qk, _, v, seg = _qkv()
  rotations = jnp.zeros((2, 8, rounds, 1))
  got = lsh.lsh_attention(qk, v, seg, rotations, chunk=4, before=3,
                          num_buckets=2)
  keys = lsh.unit_rms(qk) * 8 ** -0.5
  want = np.array(_dense_reference(qk, keys, v, seg, self_masked=True))
  # A document's first piece sees only itself: each round's logit is the
  # self value -1e5, and the rounds' weights exp(lse - logsumexp(lse))
  # sum to 1 only to float32's spacing there (as the reference's do).
  lse = jnp.full((rounds,), lsh.SELF_VALUE)
  total = float(jnp.exp(lse - jax.nn.logsumexp(lse)).sum())
  assert abs(total - 1) < 1e-2
  want[0, [0, 7]] *= total
  want[1, 0] *= total
  real = np.asarray(seg) != 0
  np.testing.assert_allclose(np.asarray(got)[real], want[real], atol=2e-6)
  np.testing.assert_allclose(got[0, 7], v[0, 7] * total, atol=1e-6)


def test_local_attention_reading_every_chunk_equals_dense():
  q, k, v, seg = _qkv()
  got = lsh.local_attention(q, k, v, seg, chunk=4, before=3)
  want = _dense_reference(q, k * 8 ** -0.5, v, seg, self_masked=False)
  real = np.asarray(seg) != 0
  np.testing.assert_allclose(np.asarray(got)[real], np.asarray(want)[real],
                             atol=2e-6)
  near = lsh.local_attention(q, k, v, seg, chunk=4, before=1)
  assert np.abs(np.asarray(near - want)[real]).max() > 1e-3  # it is local


def test_buckets_are_the_argmax_of_the_rotated_halves():
  """Two rows and two heads, so that the hash's layout moves are seen."""
  qk = jnp.asarray(np.random.RandomState(1).randn(2, 2, 5, 3), jnp.float32)
  rot = jnp.asarray(np.random.RandomState(2).randn(2, 3, 2, 3), jnp.float32)
  real = jnp.asarray([[True] * 4 + [False], [True] * 5])
  got = np.asarray(lsh.hash_buckets(qk, rot, (2, 4), real))
  for row in range(2):
    for head in range(2):
      x = (np.asarray(qk)[row, head]
           @ np.asarray(rot)[head].transpose(1, 0, 2))  # [R, T, K/2]
      first = np.argmax(np.concatenate([x[..., :1], -x[..., :1]], -1), -1)
      second = np.argmax(np.concatenate([x[..., 1:], -x[..., 1:]], -1), -1)
      want = first + 2 * second + np.arange(2)[:, None] * 9
      if row == 0:
        want[:, 4] = 8 + np.arange(2) * 9  # padding: its own last bucket
      np.testing.assert_array_equal(got[row, head], want)


def test_angular_side_is_the_argmax_of_both_signs():
  x = np.random.RandomState(3).randn(4, 7, 64).astype(np.float32)
  x[0, 0] = 0.0  # all tied: the first index, as argmax
  x[0, 1, :3] = [5.0, 5.0, -1.0]  # a tie of one sign: the first
  want = np.argmax(np.concatenate([x, -x], -1), -1)
  np.testing.assert_array_equal(lsh.angular_side(jnp.asarray(x)), want)


# ------------------------------------------------------------ reversible ---


def _train_config(**kw):
  return models.make_config("reformer", "tiny", num_layers=4, ff_chunk=6,
                            dropout_rate=0.1, attention_dropout_rate=0.1,
                            lsh_dropout_rate=0.1, **kw)


@pytest.mark.parametrize("scan", [False, True])
def test_reversible_gradients_equal_plain_autodiff(scan):
  """Dropout on and rotations drawn from the rng: the backward pass that
  recomputes each layer from its outputs gives plain autodiff's gradients
  (params and input), also for a loss on every layer's output."""
  config = _train_config(scan_layers=scan)
  x = mc.tokens(batch=B, length=24)
  params = models.init_params("reformer", config, jax.random.key(0))
  rng = {"dropout": jax.random.key(5)}

  def loss(p, rev):
    model = models.get("reformer").Model(dataclasses.replace(
        config, reversible=rev))
    out = model.apply({"params": p}, x, deterministic=False, rngs=rng)
    return jnp.mean(out["logits"] ** 2) + sum(
        jnp.mean(h ** 2) for h in out["layers"])

  want = jax.jit(jax.grad(lambda p: loss(p, False)))(params)
  got = jax.jit(jax.grad(lambda p: loss(p, True)))(params)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6,
                                                       rtol=1e-4), got, want)
  # At the stack itself, the input's gradient too.
  units = params["encoder"]["layers"]["block"] if scan else [
      params["encoder"][f"layer_{u}"] for u in range(config.units)]
  h = jax.random.normal(jax.random.key(1), (B, 24, config.embed_dim))
  ctx = reformer.Context((x != 0).astype(jnp.int32))
  keys = {k: jax.random.split(jax.random.key(i), config.units)
          for i, k in enumerate(("hash", "dropout"))}
  fns = reformer.rev_layers(config, deterministic=False)

  def stack_loss(p, h, rev):
    y1, y2, hs = reversible.stack(fns, p, h, ctx, keys, scanned=scan,
                                  reversible=rev)
    return jnp.sum(y1 * y2) + jnp.sum(hs[1] ** 2)

  want = jax.jit(jax.grad(lambda p, h: stack_loss(p, h, False), (0, 1)))(
      units, h)
  got = jax.jit(jax.grad(lambda p, h: stack_loss(p, h, True), (0, 1)))(
      units, h)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5,
                                                       rtol=1e-4), got, want)


def test_reversible_activation_memory_is_flat_in_depth():
  """The compiled gradient's scratch memory (scanned layers): the same at
  8 and 16 layers when reversible, growing with depth otherwise."""
  x = mc.tokens(batch=B, length=64)

  def scratch(layers, rev):
    _, model = models.make("reformer", "tiny", num_layers=layers,
                           scan_layers=True, reversible=rev)
    params = jax.eval_shape(model.init, jax.random.key(0), x)
    grad = jax.grad(lambda p: model.apply(p, x)["logits"].sum())
    return jax.jit(grad).lower(params).compile().memory_analysis(
    ).temp_size_in_bytes

  rev = [scratch(n, True) for n in (8, 16)]
  plain = [scratch(n, False) for n in (8, 16)]
  print("reversible", rev, "plain", plain)
  assert rev[1] <= 1.05 * rev[0]
  assert plain[1] > 1.5 * plain[0] and plain[0] > rev[0]


# ------------------------------------------------------- the model face ---


def test_outputs_axes_and_sharded_forward():
  config, model = models.make("reformer", "tiny", num_layers=4,
                              adapter_dim=8)
  x = mc.tokens(batch=4, length=20)  # padded to 24: three chunks
  variables = mc.init(model, x)
  paths = mc.check_logical_axes(variables)
  assert any("query_key" in p for p in paths)
  assert any("feed_forward']['adapter" in p for p in paths)
  assert any("axis_1" in p for p in paths)
  out = mc.sharded_equals_unsharded(model, variables, x)
  b, t, d = 4, 20, config.embed_dim
  chex.assert_shape(out["hidden"], (b, t, 2 * d))
  chex.assert_shape(out["logits"], (b, t, config.vocab_size))
  chex.assert_shape(list(out["layers"]), (b, t, d))
  assert len(out["layers"]) == config.num_layers + 1
  chex.assert_tree_all_finite(out)
  assert models.interface_of("reformer", config) == "decoder"
  at = jnp.array([[0, 19], [3, 3], [7, 1], [12, 0]], jnp.int32)
  some = model.apply(variables, x, logits_at=at)["logits"]
  np.testing.assert_allclose(
      some, np.take_along_axis(np.asarray(out["logits"]), at[..., None], 1),
      atol=1e-5)


def test_scan_and_bf16_match_the_unrolled_f32_model():
  config, model = models.make("reformer", "tiny", num_layers=4, ff_chunk=6)
  x = mc.tokens(batch=B, length=24, pad_tail=5)
  variables = mc.init(model, x)
  ref = jax.jit(model.apply)(variables, x)
  scanned = models.get("reformer").Model(dataclasses.replace(
      config, scan_layers=True))
  stacked = {"params": blocks.restack(nn.meta.unbox(variables["params"]))}
  boxed = jax.eval_shape(scanned.init, jax.random.key(0), x)
  assert boxed["params"]["encoder"]["layers"]["block"]["lsh_1"]["attention"][
      "query_key"]["kernel"].names == ("layers", "embed", "heads", "kv")
  got = jax.jit(scanned.apply)(stacked, x)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5),
               got, ref)
  bf16 = models.get("reformer").Model(dataclasses.replace(
      config, dtype="bfloat16"))
  low = jax.jit(bf16.apply)(variables, x)
  assert low["logits"].dtype == jnp.float32
  # A bfloat16 query may land in another bucket: a few pieces move more.
  close = np.abs(np.asarray(low["hidden"] - ref["hidden"])) < 0.1
  assert close.mean() > 0.98, close.mean()


@pytest.mark.parametrize("kinds,length", [(("local",), 24), (("lsh",), 8)])
def test_future_tokens_and_other_documents_are_invisible(kinds, length):
  """Local layers, and LSH layers on a row no longer than a chunk (dense).
  (Chunked LSH is causal in what it reads, but which past keys share a
  query's chunk depends on every token's bucket.)"""
  _, model = models.make("reformer", "tiny", attn_layers=kinds,
                         num_layers=2)
  x = mc.tokens(batch=1, length=length, pad_tail=0)
  cut = length // 2
  seg = jnp.asarray([[1] * cut + [2] * (length - cut)], jnp.int32)
  variables = mc.init(model, x)
  fwd = jax.jit(lambda v, x: model.apply(v, x, segment_ids=seg)["logits"])
  base = fwd(variables, x)
  moved = fwd(variables, x.at[0, 3].set(11))
  np.testing.assert_allclose(moved[0, :3], base[0, :3], atol=1e-6)
  assert np.abs(moved[0, 3:cut] - base[0, 3:cut]).max() > 1e-4
  np.testing.assert_allclose(moved[0, cut:], base[0, cut:], atol=1e-6)


def test_rotations_come_from_the_rngs():
  """Evaluation draws from `hash_seed` (the same every call); a "hash" rng
  or, in training, the dropout rng draws others; `rotations` overrides."""
  config, model = models.make("reformer", "tiny", dropout_rate=0.0,
                              attention_dropout_rate=0.0)
  x = mc.tokens(batch=B, length=32)
  variables = mc.init(model, x)
  run = jax.jit(lambda rngs, det: model.apply(
      variables, x, deterministic=det, rngs=rngs)["logits"],
                static_argnums=1)
  base = run({}, True)
  np.testing.assert_array_equal(run({}, True), base)
  differs = lambda a: float(np.abs(np.asarray(a - base)).max()) > 1e-4
  assert differs(run({"hash": jax.random.key(1)}, True))
  train = run({"dropout": jax.random.key(1)}, False)
  assert differs(train)
  np.testing.assert_array_equal(run({"dropout": jax.random.key(1)}, False),
                                train)
  fixed = jnp.ones(reformer.rotation_shape(config))
  pin = jax.jit(lambda rngs: model.apply(variables, x, rotations=fixed,
                                         rngs=rngs)["logits"])
  pinned = [pin(r) for r in ({}, {"hash": jax.random.key(2)})]
  np.testing.assert_array_equal(*pinned)


def test_clm_scheme_trains_reformer():
  """Rows of 32 with chunks of 8: a local and an LSH layer (two rounds)."""
  obj = oc.build("clm", "reformer", model_args=dict(num_layers=2))
  assert obj.interface == "decoder"
  batch = oc.tiny_batch(seq_len=32, batch_size=2)
  out = oc.train(obj, batch, steps=15)
  print("clm", out["first"], out["last"])
  oc.assert_near_uniform(out["first"])
  assert out["finite"]
  assert out["last"] < 0.7 * out["first"], (out["first"], out["last"])
  params = nn.meta.unbox(jax.jit(obj.init)(jax.random.key(0), batch))
  loss, _ = jax.jit(obj.loss)(params, batch, jax.random.key(2))  # dropout
  assert np.isfinite(float(loss))


def test_bad_settings_and_inputs_are_refused():
  for kw, words in ((dict(attn_layers=("lsh", "dense")), "attn_layers"),
                    (dict(num_layers=3), "multiple"),
                    (dict(num_buckets=7), "even"),
                    (dict(num_buckets=(4, 3)), "even"),
                    (dict(axial_dims=(16, 40)), "sum to"),
                    (dict(axial_shape=(8, 8)), "fewer than"),
                    (dict(lsh_chunk=0), "chunk"),
                    (dict(num_hashes=0), "num_hashes"),
                    (dict(activation="gated_gelu"), "activation")):
    with pytest.raises(ValueError, match=words):
      models.make_config("reformer", "tiny", **kw)
  hf = dict(REFERENCES["small"][0], is_decoder=True)
  for kw, words in ((dict(is_decoder=False), "is_decoder"),
                    (dict(lsh_num_chunks_after=1), "chunks_after"),
                    (dict(num_buckets=None), "num_buckets")):
    with pytest.raises(ValueError, match=words):
      reformer_convert.make_config(dict(hf, **kw))
  assert reformer_convert.period(["local", "lsh"] * 3) == ("local", "lsh")
  assert reformer_convert.period(["lsh", "lsh", "local"]) == (
      "lsh", "lsh", "local")
  config, model = models.make("reformer", "tiny")
  x = mc.tokens(batch=1, length=12)
  variables = mc.init(model, x)
  with pytest.raises(ValueError, match="dense mask"):
    model.apply(variables, x, mask=jnp.ones((1, 12, 12), bool))
  with pytest.raises(ValueError, match="rotations"):
    model.apply(variables, x, rotations=jnp.ones((2, 32, 2, 3)))
  with pytest.raises(ValueError, match="max_len"):
    model.apply(variables, mc.tokens(batch=1, length=config.max_len + 1))
