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
