"""A DistilBERT-style student distilled from a trained BERT (the `distil`
scheme: soft targets at T = 2, MLM and hidden-state cosine).

The student is the teacher's family with half its layers, started from
every other layer of the teacher; `size` names the teacher's size.

    python -m zoo.train --config configs/bert_distil.py:tiny \\
        --config.objective_args.teacher=/tmp/bert_mlm --workdir /tmp/distil

The teacher is any workdir or Hugging Face folder `zoo.load` reads,
trained with the same tokenizer (`configs/bert_mlm.py` makes one).
"""

from configs import common
from zoo import models


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.base_config()
  c.model = "bert"
  c.objective = "distil"
  c.objective_args.teacher = ""  # the teacher's workdir or HF folder
  c = common.finish(c, arg)
  if "num_layers" not in c.model_args:
    teacher = models.make_config(c.model, c.size).num_layers
    c.model_args.num_layers = max(1, teacher // 2)
  return c
