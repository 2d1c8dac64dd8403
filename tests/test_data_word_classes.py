"""The word-class similarity suite built from Brown's tags."""

import collections

import numpy as np
import pytest

from data import word_classes as wc


def test_lexicon_keeps_pure_frequent_open_class_words():
  counts = {
      "cat": collections.Counter(NOUN=9),
      "run": collections.Counter(VERB=6, NOUN=4),  # not pure
      "rare": collections.Counter(ADJ=2),  # too rare
      "the": collections.Counter(DET=50),  # a closed class
      "fast": collections.Counter(ADV=19, ADJ=1),
  }
  lex = wc.lexicon(counts, min_count=5, purity=0.9)
  assert lex == {"NOUN": ["cat"], "VERB": [], "ADJ": [], "ADV": ["fast"]}


def test_tag_counts_lower_case_alphabetic_words():
  got = wc.tag_counts([(["The", "Cat", "'s", "cat"],
                        ["DET", "NOUN", "PRT", "NOUN"])])
  assert got["cat"] == collections.Counter(NOUN=2) and "'s" not in got


def test_suite_is_deterministic_balanced_and_one_piece_words(tok):
  suite = wc.triples(tok, n=40)
  assert suite == wc.triples(tok, n=40) and len(suite) == 160
  assert suite != wc.triples(tok, n=40, seed=1)
  for word, same, other in suite:
    assert word != same
    for w in (word, same, other):
      assert len(tok.encode(" " + w)) == 1, w
  train = (s for f in wc.sources.brown_files() if f["split"] == "train"
           for s in f["sentences"])
  lex = wc.lexicon(wc.tag_counts(train), tok)
  cls = {w: c for c, words in lex.items() for w in words}
  assert all(cls[w] == cls[s] != cls[o] for w, s, o in suite)
  assert collections.Counter(cls[w] for w, _, _ in suite) == {
      c: 40 for c in wc.CLASSES}


def test_passes_compares_cosines():
  vectors = {"a": np.array([1.0, 0.0]), "b": np.array([2.0, 0.1]),
             "c": np.array([0.0, 1.0])}
  got = wc.passes(vectors, [("a", "b", "c"), ("a", "c", "b")])
  assert got.tolist() == [True, False]
  rng = np.random.default_rng(0)
  suite = wc.triples(None, n=100)
  rand = {w: rng.standard_normal(16) for w in wc.words(suite)}
  assert abs(wc.passes(rand, suite).mean() - 0.5) < 0.06  # chance


def test_a_class_without_words_is_an_error(monkeypatch):
  monkeypatch.setattr(wc, "lexicon", lambda *a: {c: ["x"] for c in
                                                 wc.CLASSES})
  with pytest.raises(ValueError, match="fewer than 2 words"):
    wc.triples(None)
