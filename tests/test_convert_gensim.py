"""gensim models as zoo word2vec tables, read through `zoo.load`'s face."""

import numpy as np
import pytest
from gensim.models import FastText, Word2Vec  # the reference (test extra)

import objectives
from data import annotate
from zoo import loading
from zoo.convert import gensim as gensim_convert

TEXTS = ["The cat sat on the mat. The dog sat on the rug.",
         "A cat and a dog ran. The bird sang on the tree.",
         "The river ran by the bank. A boat sat on the river."] * 20


def _sentences(tok):
  first = objectives.Specials(**tok.specials()).first_regular
  out = []
  for text in TEXTS:
    doc = annotate.annotate(tok, text)
    out += gensim_convert.pieces_of(doc["tokens"], doc["sentence_ids"],
                                    tok.pieces(), first)
  return out


def test_sentences_are_the_rows_pieces(tok):
  sents = _sentences(tok)
  assert sents[0] == [tok.pieces()[i] for i in tok.encode(
      "The cat sat on the mat.")]
  assert len(sents) == 6 * 20


@pytest.mark.parametrize("kind", [Word2Vec, FastText])
def test_gensim_vectors_fill_the_rows_of_their_pieces(tok, kind):
  model = kind(_sentences(tok), vector_size=12, min_count=1, epochs=2,
               seed=0, workers=1, negative=3)
  family, config, params = gensim_convert.from_gensim(model, tok, "tiny")
  assert family == "word2vec" and config.embed_dim == 12
  assert config.vocab_size == len(tok.pieces())
  cat = tok.encode(" cat")[0]
  np.testing.assert_array_equal(params["input_embedding"][cat],
                                model.wv[tok.pieces()[cat]])
  j = model.wv.key_to_index[tok.pieces()[cat]]
  np.testing.assert_array_equal(params["output_embedding"][cat],
                                model.syn1neg[j])
  unseen = tok.encode(" zebra")[0]
  assert not params["input_embedding"][unseen].any()


def test_loaded_table_reads_like_gensim(tok):
  model = Word2Vec(_sentences(tok), vector_size=16, min_count=1, epochs=5,
                   seed=0, workers=1)
  loaded = loading.Loaded(*gensim_convert.from_gensim(model, tok, "tiny"),
                          tok, None, "gensim")
  np.testing.assert_array_equal(loaded.word_vector("dog"), model.wv["▁dog"])
  ours = [w for w, _ in loaded.most_similar("dog", top_k=5)]
  theirs = [k.replace("▁", " ").strip() for k, _ in
            model.wv.most_similar("▁dog", topn=5)]
  assert ours == theirs
  # Contextual and static vectors of a static table are the same.
  np.testing.assert_allclose(loaded.word_vector("dog", "a dog ran"),
                             model.wv["▁dog"], rtol=1e-6)


def test_a_model_without_negative_sampling_is_refused(tok):
  model = Word2Vec(_sentences(tok)[:5], vector_size=4, min_count=1, hs=1,
                   negative=0, epochs=1, workers=1)
  with pytest.raises(ValueError, match="syn1neg"):
    gensim_convert.from_gensim(model, tok)
