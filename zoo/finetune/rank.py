"""Rank classification: a text-to-text model picks the label string it finds
most likely, instead of generating one.

Every label string is teacher-forced after the example's input and scored
by its log-likelihood, with its closing eos; the label of highest score
wins (as T0 and lm-evaluation-harness score classification). With
`length_norm` (the default) the score is the mean log-probability per
target piece, eos included (T-Few's normalisation), so labels of more
pieces are not penalised for their length; without it, the sum.

Letters: N examples, C labels, B batch, T target length.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from zoo.finetune import arrays as arrays_lib
from zoo.finetune import steps as step_lib
from zoo.finetune.spec import Spec


@functools.partial(jax.jit, static_argnums=0)
def target_log_probs(spec: Spec, params, batch: dict):
  """Summed log-probs of each row's targets and their count.

  Returns:
    `(total float32 [B], count float32 [B])` over positions of weight 1.
  """
  logits, targets, weights = step_lib.text_logits(spec, params, batch,
                                                  deterministic=True)
  logp = jax.nn.log_softmax(logits.astype(jnp.float32))
  pick = jnp.take_along_axis(logp, targets[..., None], -1)[..., 0]
  return jnp.sum(pick * weights, -1), jnp.sum(weights, -1)


def _row_scores(spec: Spec, params, arrays: dict, batch_size: int,
                length_norm: bool) -> np.ndarray:
  """float32 [N]: each row's target score, in fixed-size batches."""
  keys = [k for k in arrays if k != "prompt"]
  out = []
  for real, batch in arrays_lib.chunks(arrays, keys, batch_size):
    total, count = jax.device_get(target_log_probs(spec, params, batch))
    score = total / np.maximum(count, 1.0) if length_norm else total
    out.append(score[:real])
  return np.concatenate(out)


def label_scores(spec: Spec, params, examples: list[dict], labels: list[str],
                 tokenizer, lengths: dict, *, batch_size: int = 32,
                 length_norm: bool = True) -> np.ndarray:
  """float32 [N, C]: the score of every label string for every example.

  Args:
    spec: a text-to-text run's `Spec` (encoder-decoder or decoder).
    params: its {"backbone": ...} params.
    examples: N task examples (their "inputs" are read).
    labels: the C label strings.
    tokenizer, lengths: as the run was trained with.
  """
  if not spec.text_to_text:
    raise ValueError(f"rank classification scores text-to-text models; "
                     f"{spec.family} is an {spec.interface} with a head")
  columns = []
  for label in labels:
    rows = [dict(ex, targets=label) for ex in examples]
    arrays = arrays_lib.split_arrays(spec, rows, tokenizer, lengths)
    columns.append(_row_scores(spec, params, arrays, batch_size,
                               length_norm))
  return np.stack(columns, axis=1)


def rank_predictions(spec: Spec, params, examples: list[dict],
                     labels: list[str], tokenizer, lengths: dict,
                     **kw) -> np.ndarray:
  """int32 [N]: the index of each example's best-scoring label."""
  scores = label_scores(spec, params, examples, labels, tokenizer, lengths,
                        **kw)
  return np.argmax(scores, axis=1).astype(np.int32)
