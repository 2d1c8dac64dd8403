"""zoo.convert.hf_tokenizer: zoo tokenizers as Hugging Face folders that
transformers' AutoTokenizer loads with the zoo's ids."""

import io
import json
import random
import sys

import pytest
import transformers

from data import sample
from data import tokenizer as tok_lib
from zoo.convert import hf_tokenizer

TEXT = ("Quarterly profits at US media giant TimeWarner jumped 76% to $1.13bn "
        "for the three months to December.")
# Whitespace, newlines, non-ASCII, sentinels and mask markers.
EDGE = [
    TEXT, "", " ", "\n", "  leading and trailing  ", "double  spaces",
    "tabs\t\tand\tmore", "line one\nline two\n\nline four\r\n",
    "Café naïve résumé déjà vu: äöü ß Ærø £5 €3",
    "東京で会議 北京 and 서울 too ①②", "e\u0301 decomposed, é composed",
    "smart “quotes” — dashes… ﬁ ™", "emoji 🙂 ❤️ 👍🏽",
    "no\u00a0break\u3000spaces\u2028and\u0085more",
    "The <extra_id_0> jumped <extra_id_1>.", "a<extra_id_3>b",
    " <extra_id_3>  <extra_id_99> ", "<extra_id_3>\n<extra_id_4>",
    "Paris is the <mask> of France.", "<mask><mask> x <mask>",
    "a <mask>\n<extra_id_2> b", "x" * 300]


@pytest.fixture(scope="module")
def docs() -> list[str]:
  """The documents of the sample's validation split."""
  path = next((sample.ensure() / "c4").glob("c4-validation.*.json.gz"))
  return [r["text"] for r in sample._records(path)]  # pylint: disable=protected-access


@pytest.fixture(scope="module")
def texts(docs) -> list[str]:
  """Every validation document, then each line of them."""
  return docs + [line for d in docs for line in d.split("\n")]


@pytest.fixture(scope="module")
def fuzz(texts) -> list[str]:
  """Random strings over the sample's characters, spaces and specials."""
  rng = random.Random(0)
  parts = sorted(set("".join(texts))) + list(" \t\n\r\u00a0\u3000\u2028"
                                             "\u200b\u0085東서①ﬁé") + [
      "  ", "<extra_id_0>", "<extra_id_42>", "<mask>", "[MASK]"]
  return ["".join(rng.choice(parts) for _ in range(rng.randint(0, 40)))
          for _ in range(1500)]


def _zoo_ids(tok, text: str) -> list[int]:
  """The zoo's ids of `text` with each `<mask>` the mask id (`zoo.load`)."""
  ids = []
  for i, part in enumerate(text.split("<mask>")):
    ids += ([tok.specials()["mask"]] if i else []) + tok.encode(part)
  return ids


def _assert_same_ids(hf, tok, texts, zoo_ids=None):
  zoo_ids = zoo_ids or tok.encode
  for text in texts:
    assert hf(text, add_special_tokens=False)["input_ids"] == zoo_ids(text), (
        repr(text[:200]))


@pytest.fixture(scope="module", params=["sample_8k", "sample_4k"])
def spm_pair(request, tmp_path_factory, tok):
  """(zoo SentencePiece tokenizer, its export loaded by AutoTokenizer)."""
  if request.param == "sample_4k":
    tok = sample.tokenizer_for(sample.ensure(), 4000)
  folder = tmp_path_factory.mktemp(request.param)
  names = hf_tokenizer.save(tok, folder, model_type="t5")
  assert names == ["tokenizer.json", "tokenizer_config.json"]
  return tok, transformers.AutoTokenizer.from_pretrained(str(folder))


def test_sentencepiece_ids_match_on_the_sample(spm_pair, texts):
  tok, hf = spm_pair
  assert len(texts) >= 500
  _assert_same_ids(hf, tok, texts)
  eos = tok.specials()["eos"]
  for text in texts[:50]:  # with specials: the row zoo.load feeds, text eos
    assert hf(text)["input_ids"] == tok.encode(text) + [eos]


def test_sentencepiece_ids_match_on_edge_and_random_texts(spm_pair, fuzz):
  tok, hf = spm_pair
  _assert_same_ids(hf, tok, EDGE + fuzz, lambda t: _zoo_ids(tok, t))
  ids = hf("a <mask> <extra_id_3>.", add_special_tokens=False)["input_ids"]
  assert ids[1:3] == [hf.mask_token_id, tok.sentinel(3)]
  assert hf.mask_token_id == 3 and tok.sentinel(3) == tok.vocab_size - 4


def test_sentencepiece_specials_sentinels_and_decode(spm_pair):
  tok, hf = spm_pair
  s = tok.specials()
  assert hf.mask_token_id == s["mask"] == 3
  got = [getattr(hf, f"{k}_token_id") for k in
         ("pad", "eos", "unk", "mask", "cls", "sep", "bos")]
  assert got == [s[k] for k in ("pad", "eos", "unk", "mask", "cls", "sep",
                                "bos")] == list(range(7))
  assert hf.cls_token == "<cls>" and hf.bos_token == "<s>"
  assert len(hf) == tok.vocab_size
  for i in (0, 3, 99):
    assert hf.decode([tok.sentinel(i)]) == f"<extra_id_{i}>"
    assert hf.convert_tokens_to_ids(f"<extra_id_{i}>") == tok.sentinel(i)
  assert {f"<extra_id_{i}>" for i in range(100)} <= set(hf.all_special_tokens)
  # A T5 target: sentinels and pieces decode; skipping specials drops them.
  target = [tok.sentinel(0)] + tok.encode("jumped") + [tok.sentinel(1),
                                                       s["eos"]]
  out = hf.decode(target)
  assert out.startswith("<extra_id_0>") and out.endswith("</s>")
  assert "<extra_id_1>" in out and "jumped" in out
  assert hf.decode(target, skip_special_tokens=True) == "jumped"
  assert hf.decode(tok.encode(TEXT)) == tok.decode(tok.encode(TEXT)) == TEXT


def test_sentencepiece_folder_is_a_generic_fast_tokenizer(tok, tmp_path):
  hf_tokenizer.save(tok, tmp_path)
  config = json.loads((tmp_path / "tokenizer_config.json").read_text())
  assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
  assert config["mask_token"] == "<mask>" and config["extra_ids"] == 100
  assert not list(tmp_path.glob("*.model"))  # no conversion at load time
  assert json.loads((tmp_path / "tokenizer.json").read_text())["model"][
      "type"] == "Unigram"


def test_byte_fallback_sentencepiece_matches(docs, texts, tmp_path):
  import sentencepiece as spm  # pylint: disable=import-outside-toplevel
  model = io.BytesIO()
  spm.SentencePieceTrainer.train(
      sentence_iterator=iter(texts[len(docs):]), model_writer=model,
      vocab_size=400, pad_id=0, eos_id=1, unk_id=2, bos_id=6,
      control_symbols=["<mask>", "<cls>", "<sep>"], byte_fallback=True,
      num_threads=1, minloglevel=2, hard_vocab_limit=False)
  tok = tok_lib.SentencePieceTokenizer(model.getvalue())
  hf_tokenizer.save(tok, tmp_path)
  hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
  _assert_same_ids(hf, tok, texts[:200] + EDGE, lambda t: _zoo_ids(tok, t))
  ids = tok.encode("東京")
  assert 2 not in ids and hf.decode(ids) == "東京"


def _wordpiece_vocab(texts, size=1500) -> list[str]:
  import tokenizers  # pylint: disable=import-outside-toplevel
  tk = tokenizers.Tokenizer(tokenizers.models.WordPiece(unk_token="[UNK]"))
  tk.normalizer = tokenizers.normalizers.BertNormalizer(lowercase=False)
  tk.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
  tk.train_from_iterator(texts, tokenizers.trainers.WordPieceTrainer(
      vocab_size=size, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]",
                                       "[MASK]"]))
  vocab = tk.get_vocab()
  return sorted(vocab, key=vocab.get)


@pytest.mark.parametrize("options,model_type,cls", [
    ({}, None, "BertTokenizer"),
    ({"lower_case": False}, "bert", "BertTokenizer"),
    ({"lower_case": True, "strip_accents": False}, "electra",
     "ElectraTokenizer"),
    ({"chinese_chars": False}, "distilbert", "DistilBertTokenizer")])
def test_wordpiece_ids_match(docs, texts, fuzz, tmp_path, options,
                             model_type, cls):
  tok = tok_lib.WordPieceTokenizer(_wordpiece_vocab(docs), **options)
  names = hf_tokenizer.save(tok, tmp_path, model_type)
  assert names == ["tokenizer.json", "tokenizer_config.json", "vocab.txt"]
  config = json.loads((tmp_path / "tokenizer_config.json").read_text())
  assert config["tokenizer_class"] == cls
  hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
  _assert_same_ids(hf, tok, texts + EDGE + fuzz)
  s = tok.specials()
  for text in EDGE:  # the row zoo.load feeds: [CLS] text [SEP]
    assert hf(text)["input_ids"] == [s["cls"]] + tok.encode(text) + [s["sep"]]
  ids = hf("x [MASK] y", add_special_tokens=False)["input_ids"]
  assert ids[1] == hf.mask_token_id == s["mask"] == tok.ids["[MASK]"]
  got = [getattr(hf, f"{k}_token_id") for k in ("pad", "eos", "unk", "cls",
                                                "sep", "bos")]
  assert got == [s[k] for k in ("pad", "eos", "unk", "cls", "sep", "bos")]
  assert tok_lib.load_path(tmp_path / "vocab.txt").encode(TEXT) == (
      tok.encode(TEXT))


def _assert_round_trip(tok, folder, texts):
  """`tok` exported to `folder`: AutoTokenizer and load_path agree with it."""
  hf_tokenizer.save(tok, folder)
  hf = transformers.AutoTokenizer.from_pretrained(str(folder))
  again = tok_lib.load_path(folder)
  assert isinstance(again, tok_lib.HFTokenizer)
  assert again.specials() == tok.specials()
  assert hf.mask_token_id == tok.specials()["mask"]
  for text in texts:
    ids = tok.encode(text)
    assert hf(text, add_special_tokens=False)["input_ids"] == ids, text[:200]
    assert again.encode(text) == ids
    assert again.row(text) == tok.row(text)
    marked = text.replace("<mask>", hf.mask_token).replace("[MASK]",
                                                            hf.mask_token)
    assert hf(marked)["input_ids"] == tok.row(text)
  return hf


def test_hf_bert_folder_round_trips(texts, tmp_path, minilm_folder):
  folder = minilm_folder
  tok = tok_lib.load_path(folder)
  hf = _assert_round_trip(tok, tmp_path, texts[:300] + EDGE)
  ref = transformers.AutoTokenizer.from_pretrained(str(folder))
  for text in texts[:100] + EDGE:
    assert hf(text)["input_ids"] == ref(text)["input_ids"]
  assert (hf.cls_token, hf.sep_token, hf.mask_token) == (
      "[CLS]", "[SEP]", "[MASK]")


def test_hf_byte_level_bpe_folder_round_trips(docs, texts, tmp_path):
  import tokenizers  # pylint: disable=import-outside-toplevel
  specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
  bpe = tokenizers.ByteLevelBPETokenizer()
  bpe.train_from_iterator(docs, vocab_size=600, special_tokens=specials)
  bpe.post_processor = tokenizers.processors.RobertaProcessing(("</s>", 2),
                                                               ("<s>", 0))
  (tmp_path / "roberta").mkdir()
  bpe.save(str(tmp_path / "roberta" / "tokenizer.json"))
  names = dict(bos="<s>", pad="<pad>", eos="</s>", unk="<unk>", mask="<mask>",
               cls="<s>", sep="</s>")
  (tmp_path / "roberta" / "tokenizer_config.json").write_text(json.dumps(
      {f"{k}_token": v for k, v in names.items()}))
  tok = tok_lib.load_path(tmp_path / "roberta")
  assert tok.vocab_size == 600 and tok.specials()["mask"] == 4
  hf = _assert_round_trip(tok, tmp_path / "out", texts[:200] + EDGE)
  assert hf("a <mask> b")["input_ids"][0] == hf.bos_token_id == 0
  assert hf.mask_token_id in hf("a <mask> b")["input_ids"]
  assert (hf.eos_token_id, hf.sep_token_id, hf.pad_token_id) == (2, 2, 1)


def test_exported_sentencepiece_round_trips_as_a_hf_folder(tok, texts,
                                                           tmp_path):
  hf_tokenizer.save(tok, tmp_path / "a")
  again = tok_lib.load_path(tmp_path / "a")
  assert again.specials() == tok.specials()
  hf = _assert_round_trip(again, tmp_path / "b", texts[:200] + EDGE)
  _assert_same_ids(hf, tok, texts[:200] + EDGE, lambda t: _zoo_ids(tok, t))
  assert hf.decode([tok.sentinel(7)]) == "<extra_id_7>"


def test_unknown_kind_is_refused(tmp_path):
  class Chars:
    kind = "characters"
  with pytest.raises(ValueError, match="'characters'.*Chars"):
    hf_tokenizer.save(Chars(), tmp_path)
  with pytest.raises(ValueError, match="None"):
    hf_tokenizer.save(object(), tmp_path)
  assert not list(tmp_path.iterdir())


def test_sentencepiece_models_it_cannot_reproduce_are_refused(docs,
                                                              tmp_path):
  bpe = tok_lib.train_sentencepiece(docs, vocab_size=300,
                                    model_type="bpe")
  with pytest.raises(ValueError, match="BPE"):
    hf_tokenizer.save(bpe, tmp_path)


def test_missing_transformers_says_how_to_install(tok, tmp_path,
                                                  monkeypatch):
  monkeypatch.setitem(sys.modules, "transformers", None)
  with pytest.raises(ImportError, match="pip install transformers"):
    hf_tokenizer.save(tok, tmp_path)
