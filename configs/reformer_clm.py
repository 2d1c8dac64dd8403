"""reformer pre-trained with the clm objective.

Reformer: a causal LM of reversible layers alternating local and LSH
attention. The tiny size's chunks are 8 pieces, so its 64-piece rows
cross eight chunks and hash into 8 buckets twice; the released sizes
(`small`: crime-and-punishment, `base`: enwik8) read rows of thousands
of pieces in chunks of 64 to 256:

    python -m zoo.train --config configs/reformer_clm.py:tiny --workdir /tmp/reformer_clm
    python -m zoo.train --config configs/reformer_clm.py:size=small,seq_len=4096 --workdir DIR

Training draws fresh LSH rotations every step from the step's dropout
rng; evaluation hashes with `model_args.hash_seed`.
"""

from configs import common


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.base_config()
  c.model = "reformer"
  c.objective = "clm"
  return common.finish(c, arg)
