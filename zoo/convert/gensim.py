"""gensim word2vec and FastText models as zoo word2vec tables.

    family, config, params = zoo.convert.gensim.from_gensim(model, tokenizer)

A gensim model trained on sentences of the tokenizer's piece strings (as
`pieces_of` writes them) becomes the zoo's `word2vec` family over the same
ids: row i of `input_embedding` is gensim's vector of piece i (a FastText
model's includes its n-grams, as `zoo.models.static.fold` does for the
zoo's own), row i of `output_embedding` its negative-sampling output row
(`syn1neg`). Pieces gensim never saw keep zero rows. The network then
reads like any zoo encoder: `zoo.loading.Loaded`, probes, fine-tuning,
`zoo.convert.workdir.model_to_workdir`. gensim itself is needed only to
have such a model in hand; nothing here imports it.
"""

import numpy as np

from zoo import models


def pieces_of(tokens, sentence_ids, pieces: list[str], first_regular: int
              ) -> list[list[str]]:
  """The sentences of an annotated document as lists of piece strings.

  Args:
    tokens, sentence_ids: int [T] arrays (`data.annotate.annotate`).
    pieces: the tokenizer's piece strings, by id.
    first_regular: the smallest ordinary id; special pieces are left out.

  Returns:
    One list per sentence, in order (empty sentences dropped).
  """
  out = {}
  for tok, sent in zip(np.asarray(tokens), np.asarray(sentence_ids)):
    if tok >= first_regular and sent > 0:
      out.setdefault(int(sent), []).append(pieces[int(tok)])
  return [out[k] for k in sorted(out)]


def from_gensim(model, tokenizer, size: str = "small"):
  """`(family, config, params)`: a gensim model as a zoo word2vec table.

  Args:
    model: a trained `gensim.models.Word2Vec` or `FastText` (negative
      sampling, so that `syn1neg` exists).
    tokenizer: the tokenizer whose piece strings it was trained on.
    size: the zoo size whose fields fill the rest of the config.

  Returns:
    ("word2vec", its Config with gensim's width, float32 params).
  """
  pieces = tokenizer.pieces()
  wv = model.wv
  dim = int(wv.vector_size)
  syn1neg = getattr(model, "syn1neg", None)
  if syn1neg is None or len(syn1neg) == 0:
    raise ValueError("the gensim model has no negative-sampling output "
                     "table (syn1neg); train it with negative > 0")
  config = models.make_config("word2vec", size, vocab_size=len(pieces),
                              embed_dim=dim)
  vin = np.zeros((len(pieces), dim), np.float32)
  vout = np.zeros((len(pieces), dim), np.float32)
  for i, piece in enumerate(pieces):
    j = wv.key_to_index.get(piece)
    if j is not None:
      vin[i], vout[i] = wv.get_vector(piece), syn1neg[j]
  return "word2vec", config, {"input_embedding": vin,
                              "output_embedding": vout}
