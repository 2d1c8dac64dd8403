"""Annotations and packing: sentence/word/phrase ids and the row contract."""

import numpy as np

from data import annotate
from data import batch
from data import packing

DOC = ("Time Warner said on Friday that profits rose. Mr. Smith of the Bank "
       "of England disagreed!\nA new paragraph starts here. It has 2 "
       "sentences.")


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
    batch.check_row({k: v[r] for k, v in rows.items()})
    # Constant within a word: a word never spans two sentences or docs.
    w = rows["word_ids"][r]
    for k in ("sentence_ids", "doc_ids"):
      same = w[1:] == w[:-1]
      assert (rows[k][r][1:][same] == rows[k][r][:-1][same]).all()
  flat = rows["tokens"].ravel()
  assert list(flat[flat != 0]) == [i for d in docs
                                   for i in list(d["tokens"]) + [1]]
  assert (rows["tokens"][-1] == 0).any()  # only the last row is padded
  # doc_keys name each piece's source document across rows.
  keys = rows["doc_keys"].ravel()[flat != 0]
  want = np.concatenate([[batch.doc_key(t)] * (len(d["tokens"]) + 1)
                         for t, d in zip((DOC, "Short one.", DOC * 3), docs)])
  np.testing.assert_array_equal(keys, want)
  assert len(set(want)) == 3
