"""MobileBERT: parity with transformers (masked LM and bare model, over the
bottleneck, norm and trigram variants), export, packing, the model face,
the mlm scheme, and refused settings."""

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
from zoo.models import blocks

_SMALL = dict(vocab_size=128, hidden_size=64, num_hidden_layers=2,
              num_attention_heads=4, intermediate_size=64, embedding_size=32,
              intra_bottleneck_size=32, max_position_embeddings=32)
# Reference configs: "small" is the released shape scaled down (no_norm,
# trigrams, key/query-shared bottleneck, 4 FFNs, relu, first-token pooler);
# "odd" has 3 heads of 8, vocab 97, D 40, E 16, 2 FFNs, LayerNorm, no
# trigram, tanh gelu, 3 token types and the tanh pooler; the others are
# the two other attention inputs: the input bottleneck's for q, k and v,
# inverted (I = 96 > D = 64, the paper's IB-BERT teacher shape) and with
# E = D (no extra head matrix); and no bottleneck at all (I = D).
REFERENCES = {
    "small": dict(_SMALL, classifier_activation=False),
    "odd": dict(vocab_size=97, hidden_size=40, num_hidden_layers=2,
                num_attention_heads=3, intermediate_size=36,
                embedding_size=16, intra_bottleneck_size=24,
                num_feedforward_networks=2, normalization_type="layer_norm",
                trigram_input=False, hidden_act="gelu_new", type_vocab_size=3,
                max_position_embeddings=32, classifier_activation=True),
    "bottleneck_attention": dict(
        _SMALL, use_bottleneck_attention=True, num_feedforward_networks=1,
        key_query_shared_bottleneck=False, intra_bottleneck_size=96,
        normalization_type="layer_norm", embedding_size=64),
    "no_bottleneck": dict(
        _SMALL, use_bottleneck=False, key_query_shared_bottleneck=False,
        num_feedforward_networks=3, trigram_input=False, num_hidden_layers=1),
}
B, T = 2, 11


@dataclasses.dataclass
class Pair:
  """Reference models, their folders, and the zoo's conversions."""
  name: str
  folder: str  # MobileBertForMaskedLM
  ref: transformers.MobileBertForMaskedLM
  bare: transformers.MobileBertModel  # with its pooler
  config: object
  params: dict
  bare_params: dict


@pytest.fixture(scope="module", params=sorted(REFERENCES))
def pair(request, tmp_path_factory):
  torch.manual_seed(0)
  ref = transformers.MobileBertForMaskedLM(
      transformers.MobileBertConfig(**REFERENCES[request.param]))
  with torch.no_grad():  # biases and norms away from their init values
    for p in ref.parameters():
      p.add_(torch.randn_like(p) * 0.1)  # the pad row too: trigrams read it
  folder = hp.save(ref, tmp_path_factory.mktemp(request.param))
  bare = transformers.MobileBertModel.from_pretrained(folder)  # + a pooler
  bare_folder = hp.save(bare, tmp_path_factory.mktemp(request.param + "_m"))
  family, config, params = convert.from_hf(folder)
  assert family == "mobilebert"
  _, bare_config, bare_params = convert.from_hf(bare_folder)
  assert bare_config == config
  return Pair(request.param, folder, ref.eval(), bare.eval(), config, params,
              bare_params)


def _rows(config, seed=0):
  """ids [B, T] (row 1 right-padded by 3), its 0/1 mask, token types."""
  ids, mask = hp.padded_ids(config.vocab_size, config.pad_id, (B, T), seed)
  types = np.random.RandomState(seed).randint(0, config.type_vocab_size,
                                              (B, T))
  return ids, mask, types


def _forward(config, params, ids, mask, types):
  model = models.get("mobilebert").Model(config)
  return jax.jit(lambda p: model.apply(
      {"params": p}, jnp.asarray(ids), segment_ids=jnp.asarray(mask),
      token_types=jnp.asarray(types)))(params)


def test_masked_lm_matches_the_reference(pair):
  ids, mask, types = _rows(pair.config)
  with torch.no_grad():
    theirs = pair.ref(torch.tensor(ids), attention_mask=torch.tensor(mask),
                      token_type_ids=torch.tensor(types),
                      output_hidden_states=True)
  ours = _forward(pair.config, pair.params, ids, mask, types)
  assert ours["logits"].shape == (B, T, pair.config.vocab_size)
  assert len(ours["layers"]) == len(theirs.hidden_states)
  diffs = [hp.max_diff(ours["logits"], theirs.logits, mask)]
  diffs += [hp.max_diff(a, b, mask)
            for a, b in zip(ours["layers"], theirs.hidden_states)]
  print(pair.name, "mlm", max(diffs))
  assert max(diffs) <= hp.TOL


def test_bare_model_matches_the_reference(pair):
  ids, mask, types = _rows(pair.config, seed=1)
  with torch.no_grad():
    theirs = pair.bare(torch.tensor(ids), attention_mask=torch.tensor(mask),
                       token_type_ids=torch.tensor(types))
  ours = _forward(pair.config, pair.bare_params, ids, mask, types)
  diffs = (hp.max_diff(ours["hidden"], theirs.last_hidden_state, mask),
           float(np.abs(ours["pooled"] - theirs.pooler_output.numpy()).max()))
  print(pair.name, "model", diffs)
  assert max(diffs) <= hp.TOL
  assert ("pooler" in pair.bare_params) == pair.config.classifier_activation


def test_export_round_trip_is_bitwise(pair, tmp_path):
  out = convert.to_hf(convert.from_hf(pair.folder), tmp_path / "out")
  before = load_file(f"{pair.folder}/model.safetensors")
  after = load_file(str(out / "model.safetensors"))
  assert before and set(before) <= set(after)
  for key, value in before.items():
    assert after[key].tobytes() == value.tobytes(), key
  read = lambda f: json.loads((pathlib.Path(f) / "config.json").read_text())
  want, got = read(pair.folder), read(out)
  for key in ("architectures", "hidden_size", "num_attention_heads",
              "intra_bottleneck_size", "embedding_size", "trigram_input",
              "normalization_type", "num_feedforward_networks",
              "use_bottleneck_attention", "key_query_shared_bottleneck",
              "hidden_act", "type_vocab_size", "classifier_activation"):
    assert got[key] == want[key], key


def test_zoo_model_exports_with_its_heads(tmp_path):
  """A fresh tiny zoo model (NSP head on) loads as MobileBertForPreTraining
  with the zoo's logits; adapters have no reference and are refused."""
  config = models.make_config("mobilebert", "tiny", vocab_size=101,
                              num_heads=2)
  params = models.init_params("mobilebert", config, jax.random.key(3))
  ids, mask, types = _rows(config)
  ours = _forward(config, params, ids, mask, types)
  folder = convert.to_hf(("mobilebert", config, params), tmp_path / "pt")
  ref = transformers.MobileBertForPreTraining.from_pretrained(str(folder))
  with torch.no_grad():
    theirs = ref.eval()(torch.tensor(ids), attention_mask=torch.tensor(mask),
                        token_type_ids=torch.tensor(types))
  assert hp.max_diff(ours["logits"], theirs.prediction_logits, mask) <= hp.TOL
  np.testing.assert_allclose(ours["nsp_logits"],
                             theirs.seq_relationship_logits.numpy(),
                             atol=hp.TOL)
  with pytest.raises(ValueError, match="adapter_dim=4"):
    convert.to_hf(("mobilebert", dataclasses.replace(config, adapter_dim=4),
                   params), tmp_path / "adapted")


# ------------------------------------------------------- the model face ---


@pytest.fixture(scope="module")
def tiny():
  config, model = models.make("mobilebert", "tiny", dropout_rate=0.0,
                              attention_dropout_rate=0.0)
  x = mc.tokens(batch=1, length=20, pad_tail=0)
  variables = fast_params(model, x)
  fwd = jax.jit(lambda v, x, **kw: model.apply(v, x, **kw))
  return config, model, variables, fwd


def test_packed_documents_match_separate_ones(tiny):
  """Attention and the trigram both stop at a document's edges."""
  _, _, variables, fwd = tiny
  x = mc.tokens(batch=1, length=20, pad_tail=3)
  seg = jnp.array([[1] * 9 + [2] * 8 + [0] * 3], jnp.int32)
  pos = transforms.positions_from_segments(seg)
  packed = fwd(variables, x, segment_ids=seg, positions=pos)
  # The second document alone keeps its padding: trigrams read padding.
  for lo, hi, end in ((0, 9, 9), (9, 17, 20)):
    alone = fwd(variables, x[:, lo:end])
    for a, b in zip(packed["layers"], alone["layers"]):
      np.testing.assert_allclose(a[:, lo:hi], b[:, :hi - lo], rtol=1e-5,
                                 atol=2e-5)
  # One document over the same pieces: the edge tokens read otherwise.
  joined = fwd(variables, x, segment_ids=(seg > 0).astype(jnp.int32),
               positions=pos)
  edge = np.abs(joined["layers"][0] - packed["layers"][0]).max(-1)[0]
  assert edge[8] > 1e-3 and edge[9] > 1e-3 and edge[4] < 1e-6
  at = jnp.array([[16, 0, 5]], jnp.int32)
  np.testing.assert_allclose(
      fwd(variables, x, segment_ids=seg, positions=pos,
          logits_at=at)["logits"],
      np.take_along_axis(np.asarray(packed["logits"]), at[..., None], 1),
      atol=1e-5)


def test_outputs_axes_and_sharded_forward():
  config, model = models.make("mobilebert", "tiny", adapter_dim=8)
  x = mc.tokens()
  variables = mc.init(model, x)
  paths = mc.check_logical_axes(variables)
  for part in ("adapter", "input_bottleneck", "attention_bottleneck",
               "output_bottleneck", "ffn_0", "extra", "transform"):
    assert any(part in p for p in paths), part
  # Every module's output, not just the logits: rows of two shards once
  # swapped their attention outputs, which moved the logits by 1e-4 only.
  out, inter = mc.sharded_equals_unsharded(
      model, variables, x, atol=1e-5, capture_intermediates=True,
      mutable=["intermediates"])
  assert "attention" in inter["intermediates"]["encoder"]["layer_0"]
  b, t, d = 4, 16, config.embed_dim
  chex.assert_shape(out["hidden"], (b, t, d))
  chex.assert_shape(out["logits"], (b, t, config.vocab_size))
  chex.assert_shape([out["pooled"], out["nsp_logits"]], [(b, d), (b, 2)])
  assert len(out["layers"]) == config.num_layers + 1
  chex.assert_tree_all_finite(out)
  assert models.interface_of("mobilebert", config) == "encoder"
  base = models.make_config("mobilebert", "base")
  assert base.scan_layers and base.inner_dim == 128
  assert not base.classifier_activation


def test_scan_remat_and_bf16_match_the_unrolled_f32_model(tiny):
  config, model, variables, fwd = tiny
  x = mc.tokens(batch=B, length=20, pad_tail=5)
  ref = fwd(variables, x)
  scanned = models.get("mobilebert").Model(dataclasses.replace(
      config, scan_layers=True, remat="full"))
  stacked = {"params": blocks.restack(nn.meta.unbox(variables["params"]))}
  boxed = jax.eval_shape(scanned.init, jax.random.key(0), x)
  assert boxed["params"]["encoder"]["layers"]["block"]["input_bottleneck"][
      "kernel"].names == ("layers", "embed", "embed_out")
  got = jax.jit(lambda v: scanned.apply(v, x))(stacked)
  # The same arithmetic in another order: float rounding, 1e-5 or, where
  # NoNorm leaves the states large (the last layer's ~47, whose ulp is
  # 4e-6), a few ulps of the largest. Every output inherits that: the
  # pooler turns a few ulps of the first position's states into as much
  # again in `pooled` (below 1), whose own scale would judge too finely.
  scale = max(float(np.abs(b).max()) for b in jax.tree.leaves(ref))
  jax.tree.map(lambda a, b: np.testing.assert_allclose(
      a, b, atol=max(1e-5, 2e-6 * scale)), got, ref)
  bf16 = models.get("mobilebert").Model(dataclasses.replace(
      config, dtype="bfloat16"))
  low = jax.jit(lambda v: bf16.apply(v, x))(variables)
  assert low["logits"].dtype == jnp.float32
  # NoNorm leaves |hidden| ~ 10 here: bfloat16 is judged relative to it.
  rel = np.linalg.norm(low["hidden"] - ref["hidden"]) / np.linalg.norm(
      ref["hidden"])
  assert 0 < rel < 0.02, rel


def test_mlm_scheme_trains_mobilebert():
  """Dropout on; the MLM head gathers its positions (`logits_at`)."""
  obj = oc.build("mlm", "mobilebert", model_args=dict(
      dropout_rate=0.1, attention_dropout_rate=0.1))
  assert not obj.config.nsp_head
  oc.check(obj, oc.tiny_batch(seq_len=32, batch_size=4))


def test_bad_settings_are_refused():
  for kw, words in ((dict(num_heads=3), "not divisible by num_heads 3"),
                    (dict(normalization_type="batch_norm"), "no_norm"),
                    (dict(embedding_dim=128), "exceeds embed_dim"),
                    (dict(key_query_shared_bottleneck=False),
                     "make them equal"),
                    (dict(num_feedforward_networks=0), ">= 1")):
    with pytest.raises(ValueError, match=words):
      models.make_config("mobilebert", "tiny", **kw)
  # Without a bottleneck the block is D wide: 64 / 3 heads does not divide.
  with pytest.raises(ValueError, match="width 64"):
    models.make_config("mobilebert", "tiny", use_bottleneck=False,
                       num_heads=3, intra_dim=33)
