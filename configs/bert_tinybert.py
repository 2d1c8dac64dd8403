"""A TinyBERT-style student (`tinybert` general distillation: embeddings,
every layer's hidden states through a projection, attention scores).

The student is narrower and shallower than the teacher of `size`, with the
teacher's head count (attention scores are compared head by head); at
base it is the paper's TinyBERT-4 (4 layers x 312, MLP 1200, 12 heads).

    python -m zoo.train --config configs/bert_tinybert.py:tiny \\
        --config.objective_args.teacher=/tmp/bert_mlm --workdir /tmp/tinybert

The paper's general stage has no prediction-layer loss (`pred_weight` 0),
so the student's MLM head stays untrained unless `pred_weight` > 0.
"""

from configs import common

# The teacher's size -> the student's (num_layers, embed_dim, mlp_dim);
# base is the paper's, the others keep its ratios (large: 16 heads need a
# width divisible by 16).
STUDENTS = {"tiny": (1, 32, 64), "small": (2, 256, 1024),
            "base": (4, 312, 1200), "large": (6, 512, 2048)}


def get_config(arg: str | None = None):
  """The config; `arg` is "tiny", a size name, or "key=value,..."."""
  c = common.base_config()
  c.model = "bert"
  c.objective = "tinybert"
  c.objective_args.teacher = ""  # the teacher's workdir or HF folder
  c.objective_args.pred_weight = 0.0  # prediction-layer loss (task stage)
  c = common.finish(c, arg)
  layers, width, mlp = STUDENTS[c.size]
  for key, value in (("num_layers", layers), ("embed_dim", width),
                     ("mlp_dim", mlp)):
    if key not in c.model_args:
      c.model_args[key] = value
  return c
