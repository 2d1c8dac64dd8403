"""Piece counts of the corpus (what word2vec's sampling reads)."""

import collections

import numpy as np
import pytest

import data
from data import counts
from data import sample


def test_counts_are_the_pieces_of_the_texts(tok):
  texts = ["the cat sat on the mat.", "", "The end of the story."]
  got = counts.count(iter(texts), tok, tok.vocab_size, chunk=2)
  want = collections.Counter(i for t in texts for i in tok.encode(t))
  assert got.dtype == np.int64 and got.shape == (tok.vocab_size,)
  assert {i: int(c) for i, c in enumerate(got) if c} == dict(want)


def test_sample_counts_cover_its_training_split_and_are_cached(
    tok, tmp_path, monkeypatch):
  cfg = data.default_config()
  cfg.sample_dir = str(sample.default_dir())  # the built sample, not a new one
  monkeypatch.setenv("ZOO_DATA_DIR", str(tmp_path))  # where counts go
  first = counts.piece_counts(cfg, tok, max_docs=50)
  cached = list((tmp_path / "counts").glob("pieces-*.npy"))
  assert len(cached) == 1
  again = counts.piece_counts(cfg, tok, max_docs=50)
  np.testing.assert_array_equal(first, again)
  assert first.sum() > 1000 and first[tok.encode(" the")[0]] > 10
  assert counts.piece_counts(cfg, tok, max_docs=20).sum() < first.sum()


def test_synthetic_data_has_no_counts(tok):
  with pytest.raises(ValueError, match="need a text corpus"):
    counts.piece_counts({"source": "synthetic"}, tok)
