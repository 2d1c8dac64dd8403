"""Static embeddings: FastText's n-grams and hash, vectors, folding."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from zoo import models
from zoo.models import static


def test_ngrams_of_the_papers_example():
  # Bojanowski et al. 2017, section 3.2: "where", n = 3.
  assert static.char_ngrams("where", 3, 3) == ["<wh", "whe", "her", "ere",
                                               "re>"]
  grams = static.char_ngrams("where", 3, 6)
  assert len(grams) == 5 + 4 + 3 + 2  # "<where>" (7 characters) is not one
  assert static.char_ngrams("a", 3, 6) == ["<a>"]
  assert static.char_ngrams("é", 3, 6) == ["<é>"]  # characters, not bytes


def test_hash_is_fnv1a_over_signed_bytes():
  # By hand: FNV-1a starts at 2166136261 and, per byte, xors then
  # multiplies by 16777619 modulo 2^32.
  h = 2166136261
  for byte in b"<a":
    h = ((h ^ byte) * 16777619) % 2**32
  assert static.ft_hash("<a") == h
  # A byte >= 128 enters as a signed char, sign-extended to 32 bits
  # (fastText's C++): 0xC3 becomes 0xFFFFFFC3.
  h = ((2166136261 ^ 0xFFFFFFC3) * 16777619) % 2**32
  h = ((h ^ 0xFFFFFFA9) * 16777619) % 2**32
  assert static.ft_hash("é") == h


def test_hash_and_ngrams_equal_gensims():
  # gensim, the reference, is in the test extra.
  from gensim.models import fasttext as gensim_ft  # pylint: disable=import-outside-toplevel
  from gensim.models import fasttext_inner as ft_inner  # pylint: disable=import-outside-toplevel
  for word in ("where", "▁the", "naïve", "a", "ünïcödé-piece"):
    assert static.char_ngrams(word, 3, 6) == gensim_ft.compute_ngrams(
        word, 3, 6)
    for gram in static.char_ngrams(word, 3, 6):
      assert static.ft_hash(gram) == ft_inner.ft_hash_bytes(
          gram.encode("utf-8"))


def _fasttext(buckets=97, vocab=12):
  config = models.make_config("fasttext", "tiny", vocab_size=vocab,
                              ngram_buckets=buckets, max_ngrams=8)
  pieces = ["<pad>", "</s>", "<unk>"] + [f"▁w{i}x" for i in range(vocab - 3)]
  return config, pieces, static.ngram_table(pieces, config)


def test_ngram_table_holds_each_pieces_buckets():
  config, pieces, table = _fasttext()
  assert table.shape == (12, 8) and (table[0] == -1).all()
  grams = static.char_ngrams(pieces[5], 3, 6)
  want = [static.ft_hash(g) % 97 for g in grams][:8]
  assert table[5].tolist() == want  # cut to max_ngrams slots


def test_fasttext_vector_is_the_mean_of_word_and_ngram_rows():
  config, _, table = _fasttext()
  model = static.Model(config)
  tokens = jnp.array([[5, 0, 7]], jnp.int32)
  grams = jnp.asarray(table)[tokens]
  params = model.init(jax.random.key(0), tokens, grams)["params"]
  params = jax.tree.map(lambda x: x.unbox() if hasattr(x, "unbox") else x,
                        params, is_leaf=lambda x: hasattr(x, "unbox"))
  out = model.apply({"params": params}, tokens, grams)["hidden"]
  ids = [g for g in table[5] if g >= 0]
  rows = [params["input_embedding"][5]] + [params["ngram_embedding"][g]
                                           for g in ids]
  np.testing.assert_allclose(out[0, 0], np.mean(rows, 0), rtol=1e-6)
  assert not np.asarray(out[0, 1]).any()  # padding reads as zeros
  with pytest.raises(ValueError, match="n-gram ids"):
    model.apply({"params": params}, tokens)


@pytest.mark.parametrize("update", ["gradient", "release"])
def test_fasttext_mean_passes_its_gradient_back_as_configured(update):
  config, _, table = _fasttext()
  config = dataclasses.replace(config, mean_update=update)
  model = static.Model(config)
  tokens = jnp.array([[5]], jnp.int32)
  grams = jnp.asarray(table)[tokens]
  params = models.init_params("fasttext", config, jax.random.key(0))
  cot = jax.random.normal(jax.random.key(1), (config.embed_dim,))
  f = lambda p: model.apply({"params": p}, tokens, grams)["hidden"][0, 0] @ cot
  grads = jax.grad(f)(params)
  ids = [g for g in table[5] if g >= 0]
  share = 1.0 if update == "release" else 1.0 / (1 + len(ids))
  np.testing.assert_allclose(grads["input_embedding"][5], share * cot,
                             rtol=1e-6)
  np.testing.assert_allclose(grads["ngram_embedding"][ids[0]],
                             share * cot * ids.count(ids[0]), rtol=1e-6)
  # The forward value is the mean either way.
  np.testing.assert_allclose(
      f(params), static.Model(dataclasses.replace(config, mean_update=(
          "gradient"))).apply({"params": params}, tokens, grams)["hidden"][
              0, 0] @ cot, rtol=1e-6)
  with pytest.raises(ValueError, match="mean_update 'sum' is not one of"):
    static.mean_of(jnp.ones((1, 2)), jnp.ones((1, 1)), "sum")


def test_folded_fasttext_is_a_word2vec_of_the_same_vectors():
  config, _, table = _fasttext()
  tokens = jnp.arange(12, dtype=jnp.int32)[None]
  params = models.init_params("fasttext", config, jax.random.key(1))
  want = static.Model(config).apply({"params": params}, tokens,
                                    jnp.asarray(table)[tokens])["hidden"]
  w2v_config, w2v = static.fold(params, config, table)
  assert w2v_config.ngram_buckets == 0 and set(w2v) == {
      "input_embedding", "output_embedding"}
  got = static.Model(w2v_config).apply({"params": w2v}, tokens)["hidden"]
  np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_word2vec_face_reads_like_an_encoder():
  config, model = models.make("word2vec", "tiny", vocab_size=50)
  assert models.interface_of("word2vec", config) == "encoder"
  tokens = jnp.array([[7, 8, 9, 0]], jnp.int32)
  params = models.init_params("word2vec", config, jax.random.key(0))
  out = model.apply({"params": params}, tokens, segment_ids=tokens,
                    return_logits=False)
  assert out["hidden"].shape == (1, 4, config.embed_dim)
  assert len(out["layers"]) == 1
  # A static vector is the same in every context.
  again = model.apply({"params": params}, tokens[:, ::-1])["hidden"]
  np.testing.assert_array_equal(out["hidden"][0, 0], again[0, 3])
  assert not np.asarray(params["output_embedding"]).any()  # word2vec's init
  bound = 0.5 / config.embed_dim
  assert np.abs(np.asarray(params["input_embedding"])).max() <= bound
