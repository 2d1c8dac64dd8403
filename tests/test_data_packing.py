"""Annotations and packing: sentence/word/phrase ids and the row contract."""

import numpy as np
import pytest

import data
from data import annotate
from data import packing

DOC = ("Time Warner said on Friday that profits rose. Mr. Smith of the Bank "
       "of England disagreed!\nA new paragraph starts here. It has 2 "
       "sentences.")


@pytest.fixture(scope="module")
def tok():
  return data.load_tokenizer({})


def test_sentence_splitter_respects_abbreviations():
  got = annotate.split_sentences(DOC)
  assert got == ["Time Warner said on Friday that profits rose.",
                 "Mr. Smith of the Bank of England disagreed!",
                 "A new paragraph starts here.", "It has 2 sentences."]
  assert annotate.split_sentences("U.S. troops left. Then J. Doe came.") == [
      "U.S. troops left.", "Then J. Doe came."]


def test_phrase_spans_join_capitalised_runs():
  words = "Mr. Smith of the Bank of England met New York officials".split()
  assert annotate.phrase_spans(words) == [(0, 2), (4, 7), (8, 10)]
  assert annotate.phrase_spans("the cat sat".split()) == []


def test_annotate_ids(tok):
  doc = annotate.annotate(tok, DOC)
  n = len(doc["tokens"])
  assert all(len(v) == n for v in doc.values())
  assert list(np.unique(doc["sentence_ids"])) == [1, 2, 3, 4]
  words = sum(len(s.split()) for s in annotate.split_sentences(DOC))
  assert doc["word_ids"][-1] == words
  assert (np.diff(doc["word_ids"]) >= 0).all()
  assert (np.diff(doc["word_ids"]) <= 1).all()
  # "Time Warner" is phrase 1: its pieces, and only they, carry id 1.
  first = tok.decode(doc["tokens"][doc["phrase_ids"] == 1])
  assert first == "Time Warner"
  assert doc["phrase_ids"].max() == 3  # + "Mr. Smith", "Bank of England"


def test_pack_documents_obeys_the_contract(tok):
  docs = [annotate.annotate(tok, t) for t in (DOC, "Short one.", DOC * 3)]
  rows = packing.pack_documents(docs, seq_len=32)
  total = sum(len(d["tokens"]) + 1 for d in docs)
  assert rows["tokens"].shape == (-(-total // 32), 32)
  assert (rows["tokens"] == 1).sum() == 3  # one EOS per document
  for r in range(len(rows["tokens"])):
    packing.check_row({k: v[r] for k, v in rows.items()})
    # Constant within a word: a word never spans two sentences or docs.
    w = rows["word_ids"][r]
    for k in ("sentence_ids", "doc_ids"):
      same = w[1:] == w[:-1]
      assert (rows[k][r][1:][same] == rows[k][r][:-1][same]).all()
  flat = rows["tokens"].ravel()
  assert list(flat[flat != 0]) == [i for d in docs
                                   for i in list(d["tokens"]) + [1]]
  assert (rows["tokens"][-1] == 0).any()  # only the last row is padded


def test_check_row_names_the_problem():
  good = {k: np.array([5, 6, 1, 0]) for k in packing.KEYS}
  good.update(doc_ids=np.array([1, 1, 1, 0]),
              sentence_ids=np.array([1, 1, 1, 0]),
              word_ids=np.array([1, 2, 3, 0]), phrase_ids=np.zeros(4, int))
  packing.check_row(good)
  with pytest.raises(ValueError, match="word_ids nonzero on padding"):
    packing.check_row({**good, "word_ids": np.array([1, 2, 3, 4])})
  with pytest.raises(ValueError, match="sentence_ids decreases"):
    packing.check_row({**good, "sentence_ids": np.array([2, 1, 1, 0])})


def test_pack_seq2seq_segments_and_positions():
  ex = [{"inputs": [7, 8, 9], "targets": [10]},
        {"inputs": [11], "targets": [12, 13]},
        {"inputs": [14, 15, 16, 17, 18, 19], "targets": [20]}]
  out = packing.pack_seq2seq(ex, inputs_len=8, targets_len=6)
  assert out["inputs"].tolist() == [[7, 8, 9, 1, 11, 1, 0, 0],
                                    [14, 15, 16, 17, 18, 19, 1, 0]]
  assert out["inputs_segment_ids"].tolist() == [[1, 1, 1, 1, 2, 2, 0, 0],
                                                [1, 1, 1, 1, 1, 1, 1, 0]]
  assert out["inputs_positions"][0].tolist() == [0, 1, 2, 3, 0, 1, 0, 0]
  assert out["targets"].tolist() == [[10, 1, 12, 13, 1, 0],
                                     [20, 1, 0, 0, 0, 0]]
  assert out["targets_segment_ids"][0].tolist() == [1, 1, 2, 2, 2, 0]
  assert out["targets_positions"][0].tolist() == [0, 1, 0, 1, 2, 0]
  # A row closes when either side is full.
  tight = packing.pack_seq2seq(ex[:2], inputs_len=8, targets_len=4)
  assert tight["inputs"].shape == (2, 8)
  # Unpacked with truncation: one row each, EOS kept last.
  one = packing.pack_seq2seq(ex, inputs_len=4, targets_len=2, pack=False)
  assert one["inputs"].shape == (3, 4)
  assert one["inputs"][2].tolist() == [14, 15, 16, 1]
  assert one["targets"][1].tolist() == [12, 1]


def test_pack_seq2seq_encodes_text(tok):
  out = packing.pack_seq2seq([{"inputs": "sst2 sentence: good", "targets":
                               "positive"}], inputs_len=16, targets_len=4,
                             tokenizer=tok)
  row = out["targets"][0]
  assert tok.decode(row) == "positive"
  with pytest.raises(ValueError, match="no tokenizer"):
    packing.pack_seq2seq([{"inputs": "x", "targets": "y"}], inputs_len=4,
                         targets_len=4)
