"""word2vec pre-trained by CBOW with negative sampling: the mean of the
context's vectors predicts the centre piece.

    python -m zoo.train --config configs/word2vec_cbow.py:tiny --workdir /tmp/cbow

Skip-gram's recipe (`configs/word2vec_skipgram.py`) with the other scheme.
"""

from configs import word2vec_skipgram


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = word2vec_skipgram.get_config(arg)
  c.objective = "cbow"
  return c
