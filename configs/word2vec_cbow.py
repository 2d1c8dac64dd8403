"""word2vec pre-trained by CBOW with negative sampling: the mean of the
context's vectors predicts the centre piece.

    python -m zoo.train --config configs/word2vec_cbow.py:tiny --workdir /tmp/cbow

The paper's and gensim's defaults (100-d vectors, window 5, 5 noise
pieces, subsampling at 1e-3, 5 passes over the corpus); see
`configs/common.static`.
"""

from configs import common


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.static(common.base_config())
  c.model = "word2vec"
  c.objective = "cbow"
  return common.finish(c, arg)
