"""word2vec pre-trained by skip-gram with negative sampling.

    python -m zoo.train --config configs/word2vec_skipgram.py:tiny --workdir /tmp/sg

The paper's and gensim's defaults (100-d vectors, window 5, 5 noise
pieces, subsampling at 1e-3, 5 passes over the corpus); see
`configs/common.static`.
"""

from configs import common


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.static(common.base_config())
  c.model = "word2vec"
  c.objective = "skipgram"
  return common.finish(c, arg)
