"""Task distillation: a fine-tuned teacher's soft labels train a student.

TinyBERT's prediction-layer distillation (its task stage, after the general
stage of the `tinybert` scheme) and the soft targets of Hinton et al.: the
student's head learns the teacher's predicted distribution at temperature
T, mixed with the gold labels,

    loss = w * KL(p_teacher || p_student) * T^2 + (1 - w) * CE(gold),

with w = `soft_weight` (TinyBERT: 1, soft labels only, T = 1). The teacher
is the `State` of a fine-tuning run on the same task
(`finetune(..., return_state=True)`), on any backbone that reads the same
tokenizer. Its logits on the training rows are computed once before
training, with no dropout, which is what running it inside every step
would give; they ride in each batch as "soft_logits".
"""

import numpy as np

from zoo.finetune import steps as step_lib
from zoo.finetune.spec import Spec

KINDS = ("class", "pair", "tags")  # tasks whose head gives a distribution


def check(spec: Spec, teacher) -> None:
  """Rejects a teacher whose predictions the student cannot learn."""
  if spec.kind not in KINDS or spec.text_to_text:
    raise ValueError(f"task distillation needs a head over classes or tags "
                     f"({KINDS}); this run is a {spec.interface} on a "
                     f"{spec.kind!r} task")
  t = teacher.spec
  if t.text_to_text or (t.kind, t.num_labels) != (spec.kind,
                                                  spec.num_labels):
    raise ValueError(f"the teacher was fine-tuned on a {t.kind!r} task of "
                     f"{t.num_labels} labels; the student's is {spec.kind!r} "
                     f"of {spec.num_labels}")


def soft_logits(teacher, arrays: dict, batch_size: int) -> np.ndarray:
  """The teacher's head logits on every training row.

  Args:
    teacher: a fine-tuning `State` (its spec and params).
    arrays: the student's training arrays (`tokens` [N, T] and the rest).
    batch_size: rows per teacher call (the last call is padded).

  Returns:
    float32 [N, C] (class, pair) or [N, T, C] (tags).
  """
  keys = [k for k in ("tokens", "token_types") if k in arrays]
  n = len(arrays["tokens"])
  out = []
  for start in range(0, n, batch_size):
    batch = {k: arrays[k][start:start + batch_size] for k in keys}
    rows = len(batch["tokens"])
    batch = {k: np.concatenate([v, np.repeat(v[-1:], batch_size - rows, 0)])
             for k, v in batch.items()}
    logits = step_lib.logits_step(teacher.spec, teacher.params, batch)
    out.append(np.asarray(logits, np.float32)[:rows])
  return np.concatenate(out)
