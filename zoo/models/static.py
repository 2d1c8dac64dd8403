"""Static embeddings: word2vec (CBOW, skip-gram) and FastText vectors.

Mikolov et al. 2013 ("Efficient estimation of word representations",
"Distributed representations of words and phrases"); Bojanowski et al.
2017 ("Enriching word vectors with subword information"). One vector per
vocabulary unit, looked up whatever its context: the table the contextual
families are measured against. The units are the tokenizer's pieces (the
sample's 8k SentencePiece pieces), so every scheme of the zoo reads the
same rows; a word of several pieces is the mean of its pieces' vectors.

Two tables, as word2vec keeps them: `input_embedding` (the vectors users
read, word2vec's syn0) and `output_embedding` (the context side of the
negative-sampling loss, syn1neg). With `ngram_buckets > 0` the model is FastText: a unit's
input vector is the mean of its own row and the rows of its character
n-grams (`ngram_table`: lengths `min_n` to `max_n` of "<piece>", hashed
into the buckets by FastText's FNV-1a), so units that share n-grams share
part of their vector.

The face is an encoder's: `hidden` [B,T,D] holds each token's input vector
and `layers` that one layer, so probes and fine-tuning read a static model
as they read any encoder (a bag of vectors, mean-pooled). Nothing mixes
positions: the vector of token t depends on token t alone.

Letters: B batch, T length, D embed, V vocab, G n-grams per unit, N buckets.
"""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from zoo.models import dense

INTERFACE = "encoder"
# Why the minimal-pairs view does not apply (`zoo.scoring.method`).
NO_SENTENCE_SCORE = ("a static embedding gives no probability to a "
                     "sentence (its loss scores piece pairs, not text)")
# FastText's hash of an n-gram's UTF-8 bytes (32-bit FNV-1a).
FNV_OFFSET, FNV_PRIME = 2166136261, 16777619


@dataclasses.dataclass(frozen=True)
class Config:
  """Static-embedding hyper-parameters."""
  vocab_size: int = 8000  # V: units (pieces), one input and output row each
  pad_id: int = 0  # padding token id (its vector reads as zeros)
  dtype: str = "float32"  # compute dtype; params stay float32
  embed_dim: int = 100  # D: vector width (word2vec's and FastText's default)
  ngram_buckets: int = 0  # N: FastText's n-gram rows; 0: plain word2vec
  min_n: int = 3  # shortest character n-gram (FastText)
  max_n: int = 6  # longest character n-gram (FastText)
  max_ngrams: int = 32  # G: n-gram slots per unit; longer pieces are cut
  # How a mean of vectors (FastText's unit vector, CBOW's context) passes
  # its gradient back: "gradient" divides it among the averaged rows, as
  # the mean's derivative does; "release" gives each row all of it, as
  # word2vec.c, fastText and gensim update (`release_mean`).
  mean_update: str = "gradient"
  scan_layers: bool = False  # no layers to scan (the trainer asks)


SIZES = {
    "tiny": dict(embed_dim=32),
    "small": dict(embed_dim=100),
    "base": dict(embed_dim=300),
}
# Two family names, one file: "word2vec" is the plain table, "fasttext"
# adds the n-gram buckets (fastText's 2M buckets serve millions of words;
# 8k pieces need far fewer).
FAMILY_DEFAULTS = {"fasttext": {"ngram_buckets": 50_000}}


def ft_hash(text: str) -> int:
  """FastText's hash of a string: FNV-1a over its UTF-8 bytes, each byte
  taken as a signed char (as fastText's C++ and gensim do)."""
  h = FNV_OFFSET
  for byte in text.encode("utf-8"):
    h = (h ^ ((byte - 256 if byte > 127 else byte) & 0xFFFFFFFF))
    h = (h * FNV_PRIME) & 0xFFFFFFFF
  return h


MEAN_UPDATES = ("gradient", "release")


def mean_of(total, count, update: str):
  """total / max(count, 1), the mean of `count` summed vectors.

  Args:
    total: [..., D] the sum of the vectors.
    count: [..., 1] how many were summed.
    update: "gradient": the mean's own derivative (each summed row gets
      1/count of the cotangent); "release": each summed row gets all of
      it, as word2vec.c's CBOW and fastText's subword vectors are updated.

  Returns:
    [..., D] the mean (the same forward value either way).
  """
  if update not in MEAN_UPDATES:
    raise ValueError(f"mean_update {update!r} is not one of {MEAN_UPDATES}")
  mean = total / jnp.maximum(count, 1)
  if update == "gradient":
    return mean
  return total + jax.lax.stop_gradient(mean - total)


def char_ngrams(unit: str, min_n: int, max_n: int) -> list[str]:
  """The character n-grams of "<unit>", shortest first, left to right
  (the paper's "where", n = 3: <wh, whe, her, ere, re>)."""
  word = f"<{unit}>"
  return [word[i:i + n] for n in range(min_n, min(len(word), max_n) + 1)
          for i in range(len(word) - n + 1)]


def ngram_table(pieces: list[str], config: Config) -> np.ndarray:
  """Bucket ids of every unit's n-grams, for `ngrams = table[tokens]`.

  Args:
    pieces: the V vocabulary strings, indexed by token id.
    config: a FastText config (`ngram_buckets > 0`).

  Returns:
    int32 [V, G]: bucket ids in [0, N), -1 on empty slots; the padding id's
    row is empty.
  """
  if config.ngram_buckets <= 0:
    raise ValueError("ngram_table needs a FastText config (ngram_buckets > 0)")
  table = np.full((len(pieces), config.max_ngrams), -1, np.int32)
  for i, piece in enumerate(pieces):
    if i == config.pad_id:
      continue
    grams = char_ngrams(piece, config.min_n, config.max_n)
    ids = [ft_hash(g) % config.ngram_buckets for g in grams]
    table[i, :len(ids[:config.max_ngrams])] = ids[:config.max_ngrams]
  return table


def fold(params, config: Config, table: np.ndarray):
  """A FastText model as the word2vec table of its pieces' vectors.

  The vocabulary is closed (the tokenizer's pieces), so each piece's
  FastText vector is fixed: the mean of its own row and its n-grams' rows.
  Evaluation reads a FastText model this way.

  Args:
    params: a FastText model's (unboxed) params.
    config: its Config (`ngram_buckets > 0`).
    table: int32 [V, G], `ngram_table(pieces, config)`.

  Returns:
    `(config, params)` of the equal word2vec model (`ngram_buckets = 0`).
  """
  model = Model(config)
  ids = jnp.arange(config.vocab_size, dtype=jnp.int32)
  vectors = model.apply({"params": params}, ids, jnp.asarray(table),
                        method="vectors")
  # The padding row stays as trained: `vectors` reads it as zeros anyway.
  vectors = vectors.at[config.pad_id].set(params["input_embedding"][
      config.pad_id])
  return dataclasses.replace(config, ngram_buckets=0), {
      "input_embedding": vectors,
      "output_embedding": params["output_embedding"]}


class Model(nn.Module):
  """Input vectors per token; the output table for the training loss."""
  config: Config

  def setup(self):
    cfg = self.config
    scale = 0.5 / cfg.embed_dim  # word2vec.c's and gensim's input init
    self.input = dense.param_with_axes(
        self, "input_embedding", dense.uniform_init(scale),
        (cfg.vocab_size, cfg.embed_dim),
        ("vocab", "embed"))
    # word2vec starts the output side at zero.
    self.output = dense.param_with_axes(
        self, "output_embedding", nn.initializers.zeros,
        (cfg.vocab_size, cfg.embed_dim), ("vocab", "embed"))
    if cfg.ngram_buckets > 0:
      self.ngram = dense.param_with_axes(
          self, "ngram_embedding", dense.uniform_init(1.0 / cfg.embed_dim),
          (cfg.ngram_buckets, cfg.embed_dim), ("vocab", "embed"))

  def vectors(self, tokens, ngrams=None):
    """Input vectors: tokens [...] int32 (ngrams [..., G] int32, FastText)
    -> [..., D] float32; padding reads as zeros."""
    cfg = self.config
    vec = jnp.take(self.input, tokens, axis=0)
    # Init needs no n-grams: setup made every table.
    if cfg.ngram_buckets > 0 and not (ngrams is None
                                      and self.is_initializing()):
      if ngrams is None:
        raise ValueError("a FastText model reads its tokens' n-gram ids "
                         "(ngrams=ngram_table(pieces, config)[tokens])")
      have = ngrams >= 0
      grams = jnp.take(self.ngram, jnp.maximum(ngrams, 0), axis=0)
      grams = (grams * have[..., None]).sum(-2)
      vec = mean_of(vec + grams, 1.0 + have.sum(-1, keepdims=True),
                    cfg.mean_update)
    return jnp.where((tokens != cfg.pad_id)[..., None], vec, 0.0)

  def output_vectors(self, ids):
    """Output (context) vectors: ids [...] int32 -> [..., D] float32."""
    return jnp.take(self.output, ids, axis=0)

  def __call__(self, tokens, ngrams=None, *, deterministic: bool = True,
               return_logits: bool = False, **unused):
    """tokens [B,T] int32 -> {"hidden": [B,T,D], "layers": [[B,T,D]]}.

    Keywords the encoder families take (segment_ids, positions, mask,
    token_types) change nothing here: a static vector has no context.
    """
    del deterministic, return_logits, unused
    hidden = self.vectors(tokens, ngrams)
    return {"hidden": hidden, "layers": [hidden]}
