"""Hugging Face export: parity with transformers, round trips, refusals."""

import dataclasses
import gzip
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from safetensors.numpy import load_file

import zoo
from configs.compare import smoke
from tests import hf_parity as hp
from tests import lanes
from zoo import convert, models, train
from zoo import generate as gen_lib
from zoo.convert import __main__ as cli
from zoo.convert import export
from zoo.models import blocks

VOCAB = 97
# Odd sizes: 3 layers, 3 heads of 16, an MLP of 80.
ODD = dict(vocab_size=VOCAB, num_layers=3, embed_dim=48, num_heads=3,
           mlp_dim=80, dropout_rate=0.0)
FAMILIES = ("bert", "roberta", "gpt2", "distilbert", "albert", "electra",
            "t5", "bart")


def _config(family, **overrides):
  kw = dict(ODD)
  if family == "t5":
    kw["head_dim"] = 16
  if family == "electra":
    kw["embedding_dim"] = 24
  return models.make_config(family, "tiny", **dict(kw, **overrides))


def _forward_both(family, config, params, folder, rows=None):
  """(ours, theirs, mask): logits of the zoo model and of the exported one.

  rows: `(ids, mask)`, or `(ids, mask, dec, dec_mask)` for encoder-decoders
  (default: random padded rows).
  """
  arch = json.loads((folder / "config.json").read_text())["architectures"][0]
  ref = getattr(transformers, arch).from_pretrained(
      str(folder), attn_implementation="eager").eval()
  encdec = models.interface_of(family, config) == "encdec"
  if rows is None:
    rows = hp.padded_ids(config.vocab_size, config.pad_id, low=7)
    if encdec:
      rows += hp.padded_ids(config.vocab_size, config.pad_id, shape=(2, 6),
                            seed=1, low=7)
  ids, mask = rows[:2]
  model = models.get(family).Model(config)
  seg = jnp.asarray(mask, jnp.int32)
  with torch.no_grad():
    if encdec:
      dec, dmask = rows[2:]
      theirs = ref(torch.tensor(ids), attention_mask=torch.tensor(mask),
                   decoder_input_ids=torch.tensor(dec),
                   decoder_attention_mask=torch.tensor(dmask)).logits
      ours = model.apply({"params": params}, jnp.asarray(ids), jnp.asarray(dec),
                         enc_segment_ids=seg,
                         dec_segment_ids=jnp.asarray(dmask, jnp.int32))
      return ours["logits"], theirs, dmask
    out = ref(torch.tensor(ids), attention_mask=torch.tensor(mask))
    theirs = getattr(out, "prediction_logits", None)
    theirs = out.logits if theirs is None else theirs
    ours = model.apply({"params": params}, jnp.asarray(ids), segment_ids=seg)
    return ours["logits"], theirs, mask


@pytest.mark.parametrize("family", FAMILIES)
def test_exported_model_gives_the_zoo_logits(tmp_path, family):
  config = _config(family)
  params = models.init_params(family, config, jax.random.key(1))
  folder = convert.to_hf((family, config, params), tmp_path / family)
  ours, theirs, mask = _forward_both(family, config, params, folder)
  assert np.asarray(ours).shape == tuple(theirs.shape)
  assert hp.max_diff(ours, theirs, mask) < hp.TOL


def _hf_models():
  """Reference models of every exportable class, odd sizes."""
  t = transformers
  small = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=3,
               num_attention_heads=4, intermediate_size=37)
  t5 = dict(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=37, num_layers=2,
            num_decoder_layers=3, num_heads=4)
  return {
      "bert": lambda: t.BertForPreTraining(t.BertConfig(**small)),
      "roberta": lambda: t.RobertaForMaskedLM(t.RobertaConfig(
          pad_token_id=1, max_position_embeddings=20, **small)),
      "gpt2": lambda: t.GPT2LMHeadModel(t.GPT2Config(
          vocab_size=VOCAB, n_embd=32, n_layer=3, n_head=4, n_positions=16)),
      "distilbert": lambda: t.DistilBertForMaskedLM(t.DistilBertConfig(
          vocab_size=VOCAB, dim=32, n_layers=3, n_heads=4, hidden_dim=37)),
      "albert": lambda: t.AlbertForPreTraining(t.AlbertConfig(
          embedding_size=16, **small)),
      "electra_disc": lambda: t.ElectraForPreTraining(t.ElectraConfig(
          embedding_size=16, **small)),
      "electra_gen": lambda: t.ElectraForMaskedLM(t.ElectraConfig(
          embedding_size=16, **small)),
      "t5_v11": lambda: t.T5ForConditionalGeneration(t.T5Config(
          feed_forward_proj="gated-gelu", tie_word_embeddings=False, **t5)),
      "t5_original": lambda: t.T5ForConditionalGeneration(t.T5Config(**t5)),
      "bart": lambda: t.BartForConditionalGeneration(t.BartConfig(
          vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=3,
          encoder_attention_heads=4, decoder_attention_heads=4,
          encoder_ffn_dim=37, decoder_ffn_dim=37, max_position_embeddings=24)),
  }


@pytest.mark.parametrize("name", sorted(_hf_models()))
def test_hf_to_zoo_to_hf_is_bitwise(tmp_path, name):
  torch.manual_seed(0)
  model = _hf_models()[name]()
  with torch.no_grad():  # a head distinct from its init value
    for p in model.parameters():
      p.add_(torch.randn_like(p) * 0.01)
  original = hp.save(model, tmp_path / "in")
  out = convert.to_hf(convert.from_hf(original), tmp_path / "out")
  before = load_file(f"{original}/model.safetensors")
  after = load_file(str(out / "model.safetensors"))
  for key, value in before.items():
    if value.dtype.kind == "f":
      assert after[key].tobytes() == value.tobytes(), key
  read = lambda f: json.loads((f / "config.json").read_text())
  want, got = read(tmp_path / "in"), read(out)
  for key in ("architectures", "vocab_size", "model_type"):
    assert got[key] == want[key]


def test_scanned_params_export_like_unrolled(tmp_path):
  config = _config("bert")
  params = models.init_params("bert", config, jax.random.key(2))
  scanned = blocks.restack(params)
  a = convert.to_hf(("bert", config, params), tmp_path / "a")
  b = convert.to_hf(("bert", dataclasses.replace(config, scan_layers=True),
                     scanned), tmp_path / "b")
  ta, tb = (load_file(str(f / "model.safetensors")) for f in (a, b))
  assert sorted(ta) == sorted(tb)
  for k in ta:
    assert ta[k].tobytes() == tb[k].tobytes(), k


@pytest.mark.parametrize("family, words", [
    ("elmo", "no ELMo"), ("unilm", "no UniLM class"),
    ("transfo_xl", "removed its Transformer-XL")])
def test_families_without_a_reference_are_refused(tmp_path, family, words):
  config = models.make_config(family, "tiny")
  with pytest.raises(ValueError, match=words):
    convert.to_hf((family, config, {}), tmp_path)


@pytest.mark.parametrize("family, overrides, words", [
    ("bert", dict(adapter_dim=4), "adapter_dim=4"),
    ("t5", dict(activation="gated_gelu"), "activation='gated_gelu'"),
    ("bert", dict(activation="gelu_fast"), "activation 'gelu_fast'"),
    ("bert", dict(alibi=True), "ALiBi"),
    ("bert", dict(num_heads=2, head_dim=16), "pruned heads"),
])
def test_configs_the_reference_cannot_express_are_refused(
    tmp_path, family, overrides, words):
  config = _config(family, **overrides)
  with pytest.raises(ValueError, match=words):
    convert.to_hf((family, config, {}), tmp_path)


def test_tied_weights_that_differ_are_refused():
  config = _config("t5", tie_embeddings=True, scale_logits=True)
  params = models.init_params("t5", config, jax.random.key(0))
  _, tensors = export.hf_tensors("t5", config, params)
  assert tensors["lm_head.weight"].tobytes() == (
      tensors["shared.weight"].tobytes())
  index = {"a": np.arange(3), "b": np.arange(3)}
  values = {"a": np.zeros(3), "b": np.ones(3)}
  with pytest.raises(ValueError, match="tied"):
    export.scatter(index, values, 3, "Test")


def test_missing_weight_is_named():
  with pytest.raises(ValueError, match=r"needs \['b'\]"):
    export.scatter({"a": np.arange(2), "b": np.arange(2, 4)},
                   {"a": np.zeros(2)}, 4, "Test")


# Every exportable family, trained by the one trainer on its own scheme.
SCHEMES = (("bert", "mlm"), ("roberta", "mlm"), ("distilbert", "mlm"),
           ("albert", "sop"), ("electra", "electra"), ("gpt2", "clm"),
           ("t5", "t5_span"), ("bart", "bart"))


def _texts(n: int = 3) -> list[str]:
  """The first texts of the sample's validation split."""
  from data import sample  # pylint: disable=import-outside-toplevel
  path = sample.default_dir() / "c4" / "c4-validation.00000-of-00001.json.gz"
  with gzip.open(path, "rt", encoding="utf-8") as f:
    return [json.loads(next(f))["text"] for _ in range(n)]


def _zoo_and_reference_logits(loaded, folder, texts):
  """Logits of `loaded` and of the exported folder on the same id rows."""
  ids = loaded.batch(texts, max_len=24)
  mask = (ids != loaded.config.pad_id).astype(np.int32)
  if loaded.interface == "encdec":
    dec = ids[:, :8].copy()
    return _forward_both(loaded.family, loaded.config, loaded.params, folder,
                         (ids, mask, dec, mask[:, :8]))
  return _forward_both(loaded.family, loaded.config, loaded.params, folder,
                       (ids, mask))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
  """(family, objective) -> (zoo.load of a 1-step workdir, its export)."""
  cache = {}

  def get(family, objective):
    if (family, objective) not in cache:
      c = smoke.get_config().pretrain
      c.model, c.objective = family, objective
      c.steps, c.checkpoint_every, c.log_every = 1, 1, 1
      root = tmp_path_factory.mktemp(f"{family}_{objective}")
      train.train(c, str(root / "run"))
      out = convert.to_hf(str(root / "run"), root / "hf")
      cache[family, objective] = zoo.load(str(root / "run")), out
    return cache[family, objective]
  return get


@pytest.mark.slow
@pytest.mark.parametrize("family, objective", lanes.sweep(SCHEMES))
def test_trained_workdir_exports_with_its_tokenizer(exported, family,
                                                    objective):
  loaded, out = exported(family, objective)
  texts = _texts()
  hf_tok = transformers.AutoTokenizer.from_pretrained(str(out))
  for text in texts:
    assert (hf_tok(text, add_special_tokens=False)["input_ids"]
            == loaded.tokenizer.encode(text))
  ours, theirs, mask = _zoo_and_reference_logits(loaded, out, texts)
  assert hp.max_diff(ours, theirs, mask) < hp.TOL
  assert set(loaded.companions) == ({"generator"} if family == "electra"
                                    else set())
  for name, (fam, config, params) in loaded.companions.items():
    other = dataclasses.replace(loaded, family=fam, config=config,
                                params=params)
    ours, theirs, mask = _zoo_and_reference_logits(other, out / name, texts)
    assert hp.max_diff(ours, theirs, mask) < hp.TOL


@pytest.mark.slow
def test_fill_mask_pipeline_runs_on_the_export(exported):
  loaded, out = exported("bert", "mlm")
  text = "The river <mask> was muddy after the rain."
  fill = transformers.pipeline("fill-mask", model=str(out),
                               tokenizer=str(out), top_k=5)
  theirs = [(r["token"], r["score"]) for r in fill(text)]
  ours = loaded.fill_mask(text, top_k=5)[0]
  assert [loaded.tokenizer.decode([t]) for t, _ in theirs] == [
      piece for piece, _ in ours]
  np.testing.assert_allclose([p for _, p in theirs], [p for _, p in ours],
                             rtol=1e-4)


@pytest.mark.slow
def test_t5_generate_runs_on_the_export(exported):
  loaded, out = exported("t5", "t5_span")
  text = _texts(1)[0][:200]
  prompt = loaded.batch([text])
  ours = gen_lib.greedy_encdec(
      loaded.params, jnp.asarray(prompt), family="t5", config=loaded.config,
      max_len=8, eos_id=1, start_id=loaded.config.pad_id)
  model = transformers.T5ForConditionalGeneration.from_pretrained(str(out))
  hf_tok = transformers.AutoTokenizer.from_pretrained(str(out))
  enc = hf_tok(text, return_tensors="pt")
  assert enc["input_ids"][0].tolist() == prompt[0].tolist()
  theirs = model.generate(**enc, max_new_tokens=8, do_sample=False,
                          num_beams=1)[0].tolist()
  # The reference puts the start id first; both stop at eos.
  assert theirs[0] == loaded.config.pad_id
  theirs = gen_lib.trim(np.array([theirs[1:]]), 1)[0]
  assert theirs == gen_lib.trim(ours, 1)[0]
  assert isinstance(hf_tok.decode(theirs), str)


@pytest.mark.slow
def test_cli_writes_what_to_hf_writes(exported, tmp_path, capsys):
  loaded, out = exported("gpt2", "clm")
  cli.main(["--to", "hf", loaded.path, str(tmp_path / "cli")])
  assert capsys.readouterr().out.strip() == str(tmp_path / "cli")
  a = load_file(str(out / "model.safetensors"))
  b = load_file(str(tmp_path / "cli" / "model.safetensors"))
  assert sorted(a) == sorted(b)
  assert all(a[k].tobytes() == b[k].tobytes() for k in a)


@pytest.mark.parametrize("argv, words", [
    (["--to", "hf", "w", "o", "--objective", "mlm"], "--objective applies"),
    (["--from", "hf", "f", "w", "--step", "3"], "--step applies"),
    (["--to", "onnx", "w", "o"], "invalid choice"),
    (["w", "o"], "one of the arguments --to --from is required"),
])
def test_cli_refuses_bad_flags(argv, words, capsys):
  with pytest.raises(SystemExit):
    cli.parse(argv)
  assert words in capsys.readouterr().err
