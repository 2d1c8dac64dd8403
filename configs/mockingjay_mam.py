"""Mockingjay pre-trained as a masked acoustic model on the speech sample.

    python -m zoo.train --config configs/mockingjay_mam.py:tiny --workdir /tmp/mam

Rows are utterances of the speech sample (`data.source = "speech"`: the
sample's sentences spoken by espeak-ng in 8 voices, 80 log-mel bins every
10 ms), cut to `seq_len` frames (384: 3.84 s, 128 steps of 3 stacked
frames). The scheme (`objectives.acoustic`, `mam`) hides 15% of the steps
in spans of 7 and reconstructs them (L1). Adam at 4e-4 with warm-up over
the first 7% of the steps, as the paper trains.
"""

from configs import common


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.base_config()
  c.model = "mockingjay"
  c.objective = "mam"
  c.size = "base"
  c.data.source = "speech"
  c.seq_len = 384
  c.batch_size = 16
  c.steps = 4000
  c.optimizer.lr = 4e-4
  c.optimizer.warmup_steps = 280
  c.objective_args.rate = 0.15
  c.objective_args.span = 7
  c.objective_args.decide = "span"
  return common.finish(c, arg)
