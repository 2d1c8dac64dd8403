"""FastText: skip-gram over vectors composed of character n-grams.

    python -m zoo.train --config configs/fasttext_skipgram.py:tiny --workdir /tmp/ft

Each piece's vector is the mean of its own row and the rows of its
character n-grams of length 3 to 6 (hashed into `model_args.ngram_buckets`
rows); the rest is word2vec's skip-gram recipe (`configs/common.static`).
"""

from configs import common


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.static(common.base_config())
  c.model = "fasttext"
  c.objective = "skipgram"
  return common.finish(c, arg)
