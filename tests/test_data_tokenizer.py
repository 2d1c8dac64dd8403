"""The tokenizers: T5 layout, round trips, save/load, WordPiece parity."""

import dataclasses

import numpy as np
import pytest

from data import tokenizer as tok_lib

TEXT = ("Quarterly profits at US media giant TimeWarner jumped 76% to $1.13bn "
        "for the three months to December.")


def test_specials_follow_the_t5_layout(tok):
  s = tok.specials()
  from objectives import Specials  # pylint: disable=g-import-not-at-top
  assert set(s) == {f.name for f in dataclasses.fields(Specials)}
  assert (s["pad"], s["eos"], s["unk"], s["mask"], s["cls"], s["sep"],
          s["bos"]) == (0, 1, 2, 3, 4, 5, 6)
  assert s["vocab_size"] == tok.vocab_size == 8000
  assert s["num_sentinels"] == 100 and s["sentinel0"] == 7999
  assert tok.sentinel(99) == 7900 == tok.num_pieces
  pieces = [tok.sp.id_to_piece(i) for i in range(7)]
  assert pieces[3:] == ["<mask>", "<cls>", "<sep>", "<s>"]


def test_round_trip_and_sentinels(tok):
  ids = tok.encode(TEXT)
  assert tok.decode(ids) == TEXT
  assert all(7 <= i < tok.num_pieces for i in ids)
  marked = tok.encode("The <extra_id_0> jumped <extra_id_1>.")
  assert tok.sentinel(0) in marked and tok.sentinel(1) in marked
  assert tok.decode(marked) == "The <extra_id_0> jumped <extra_id_1> ."
  # Control symbols are never produced from raw text.
  assert 3 not in tok.encode("<mask> <cls> <sep>")


def test_save_load_and_load_path(tok, tmp_path):
  tok.save(tmp_path / "t")
  for path in (tmp_path / "t", tmp_path / "t" / "spm.model"):
    again = tok_lib.load_path(path)
    assert again.encode(TEXT) == tok.encode(TEXT)
    assert again.specials() == tok.specials()
  with pytest.raises(FileNotFoundError, match="does not exist"):
    tok_lib.load_path(tmp_path / "missing.model")


def test_word_start_marks_whitespace_words(tok):
  ids = np.asarray(tok.encode("unbelievably fast"))
  assert tok.word_start[ids].sum() == 2


def test_trained_tokenizer_is_deterministic():
  lines = [TEXT, "A second line of prose, with words.", "And a third one."] * 30
  a = tok_lib.train_sentencepiece(lines, vocab_size=160)
  b = tok_lib.train_sentencepiece(lines, vocab_size=160)
  assert a.proto == b.proto
  assert a.vocab_size == a.num_pieces + 100


VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "quarter",
         "##ly", "profit", "##s", "at", "us", "media", "giant", "jump",
         "##ed", ",", ".", "$", "1", "cafe", "run", "##ning", "!", "'"]


def test_wordpiece_matches_transformers(tmp_path):
  from transformers import BertTokenizer  # pylint: disable=g-import-not-at-top
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(VOCAB) + "\n")
  ours = tok_lib.load_path(vocab)
  ref = BertTokenizer(str(vocab), do_lower_case=True)
  for text in ["Quarterly profits at US media giant jumped, $1 Café!",
               "running the giant's xyz media.", "  THE\tprofit\n"]:
    assert ours.encode(text) == ref.encode(text, add_special_tokens=False)
  s = ours.specials()
  assert (s["pad"], s["unk"], s["cls"], s["sep"], s["mask"]) == (0, 1, 2, 3, 4)
  assert ours.decode(ours.encode("quarterly profits")) == "quarterly profits"
  ours.save(tmp_path / "wp")
  assert tok_lib.load_path(tmp_path / "wp").encode("running") == [21, 22]


def test_wordpiece_without_specials_is_refused(tmp_path):
  (tmp_path / "vocab.txt").write_text("a\nb\n")
  with pytest.raises(ValueError, match=r"\[PAD\]"):
    tok_lib.load_path(tmp_path / "vocab.txt")


HARD = ["A man is playing a guitar on the stage.",
        "Ein ganz anderer Satz mit Umlauten: äöü.",
        "The Central Bank RAISED rates; Café naïve résumé!",
        "東京で会議があった。 北京  and 서울 too",
        "tabs\tand  runs   of\n\nspace -- 'quotes' \"dq\" (x) [y] {z}",
        "x [MASK] y", ""]


def _sample_validation_texts(n=40) -> list[str]:
  from data import sample  # pylint: disable=import-outside-toplevel
  folder = sample.ensure()
  path = next((folder / "c4").glob("c4-validation.*.json.gz"))
  return [r["text"][:2000] for r in sample._records(path)[:n]]  # pylint: disable=protected-access


def _assert_rows_match(ours, ref, texts):
  for text in texts:
    assert ours.row(text) == ref(text)["input_ids"], text


def test_hf_bert_folder_tokenizes_as_the_reference(minilm_folder):
  import transformers  # pylint: disable=import-outside-toplevel
  folder = minilm_folder
  ours = tok_lib.load_path(folder)
  assert isinstance(ours, tok_lib.HFTokenizer)
  ref = transformers.AutoTokenizer.from_pretrained(str(folder))
  _assert_rows_match(ours, ref, _sample_validation_texts() + HARD)
  s = ours.specials()
  assert (s["pad"], s["cls"], s["sep"], s["mask"]) == (
      ref.pad_token_id, ref.cls_token_id, ref.sep_token_id, ref.mask_token_id)
  assert ours.row("a <mask> b") == ref("a [MASK] b")["input_ids"]


@pytest.mark.parametrize("config", [None, {"do_lower_case": False},
                                    {"do_lower_case": True,
                                     "strip_accents": False}])
def test_vocab_txt_folders_follow_their_tokenizer_config(tmp_path, config,
                                                        minilm_folder):
  import json  # pylint: disable=import-outside-toplevel
  import shutil  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  shutil.copy(minilm_folder / "vocab.txt", tmp_path / "vocab.txt")
  if config is not None:
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
  ours = tok_lib.load_path(tmp_path)
  ref = transformers.BertTokenizer(str(tmp_path / "vocab.txt"),
                                   **(config or {}))
  for text in _sample_validation_texts(10) + HARD:
    assert ours.encode(text) == ref.encode(text, add_special_tokens=False)


def _assert_real_vocabulary(ours, ref, size, paragraph):
  """The reference holds the real vocabulary (not only its special tokens,
  as `T5TokenizerFast(vocab_file=...)` does under transformers 5) and so
  does the zoo's copy: both sides' ids are then worth comparing."""
  assert size > 100
  assert len(ref) == ours.vocab_size == size
  ids = ours.encode(paragraph)
  assert len(set(ids)) > 50 and ref.unk_token_id not in ids


def test_hf_sentencepiece_folder_tokenizes_as_the_reference(tmp_path, tok):
  import transformers  # pylint: disable=import-outside-toplevel
  # A T5 folder as transformers 5 writes one from a `spiece.model`: its
  # from_pretrained converts the model (pieces, scores, charsmap) to a
  # `tokenizers` Unigram; save_pretrained writes `tokenizer.json`.
  (tmp_path / "spm").mkdir()
  (tmp_path / "spm" / "spiece.model").write_bytes(tok.proto)
  ref = transformers.T5Tokenizer.from_pretrained(str(tmp_path / "spm"),
                                                 extra_ids=100)
  ref.save_pretrained(str(tmp_path / "t5"))
  ours = tok_lib.load_path(tmp_path / "t5")
  assert isinstance(ours, tok_lib.HFTokenizer)
  texts = _sample_validation_texts()
  _assert_real_vocabulary(ours, ref, tok.vocab_size, texts[0])
  texts += HARD + ["The <extra_id_0> jumped <extra_id_1>."]
  _assert_rows_match(ours, ref, texts)
  for text in texts:  # and the pieces are SentencePiece's own
    assert ours.encode(text) == tok.encode(text) == ref(
        text, add_special_tokens=False)["input_ids"], text
  s = ours.specials()
  assert s["num_sentinels"] == 100 and s["eos"] == ref.eos_token_id == 1
  assert s["sentinel0"] == ref.convert_tokens_to_ids("<extra_id_0>") == 7999
  assert (s["pad"], s["unk"]) == (ref.pad_token_id, ref.unk_token_id)
  # Words begin where SentencePiece's own pieces say (`▁`).
  for text in texts[:5]:
    ids = ours.encode(text)
    np.testing.assert_array_equal(ours.word_start[ids], tok.word_start[ids])


def test_hf_byte_level_bpe_folder_tokenizes_as_the_reference(tmp_path):
  import tokenizers  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  texts = _sample_validation_texts()
  bpe = tokenizers.ByteLevelBPETokenizer()
  bpe.train_from_iterator(texts, vocab_size=600,
                          special_tokens=["<s>", "<pad>", "</s>", "<unk>",
                                          "<mask>"])
  (tmp_path / "bpe").mkdir()
  bpe.save_model(str(tmp_path / "bpe"))
  # A RoBERTa folder from `vocab.json` and `merges.txt` as transformers 5
  # reads them (its from_pretrained; the constructor ignores the files).
  ref = transformers.RobertaTokenizer.from_pretrained(str(tmp_path / "bpe"))
  ref.save_pretrained(str(tmp_path / "roberta"))
  ours = tok_lib.load_path(tmp_path / "roberta")
  assert isinstance(ours, tok_lib.HFTokenizer)
  _assert_real_vocabulary(ours, ref, bpe.get_vocab_size(), texts[0])
  texts = texts[:10] + HARD
  # "[MASK]" is the zoo's mask marker in `row`, not text (below).
  _assert_rows_match(ours, ref, [t for t in texts if "[MASK]" not in t])
  for text in texts:  # and the pieces are the trained BPE's own
    assert ours.encode(text) == bpe.encode(text).ids == ref(
        text, add_special_tokens=False)["input_ids"], text
  s = ours.specials()
  assert (s["mask"], s["pad"], s["bos"], s["eos"], s["unk"]) == (
      ref.mask_token_id, ref.pad_token_id, ref.bos_token_id, ref.eos_token_id,
      ref.unk_token_id) == (4, 1, 0, 2, 3)
  assert ours.row("x [MASK] y") == ref("x <mask> y")["input_ids"]
  # A word begins at each piece holding its leading space (`Ġ`).
  ids = ours.encode(" the riverbanks were muddy")
  assert ours.word_start[ids].sum() == 4
