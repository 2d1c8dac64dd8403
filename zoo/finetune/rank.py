"""Rank classification: a text-to-text model picks the label string it finds
most likely, instead of generating one.

Every label string is teacher-forced after the example's input and scored
by its log-likelihood, with its closing eos; the label of highest score
wins (as T0 and lm-evaluation-harness score classification). With
`length_norm` (the default) the score is the mean log-probability per
target piece, eos included (T-Few's normalisation), so labels of more
pieces are not penalised for their length; without it, the sum.

An encoder-decoder encodes each batch of inputs once for every label. A
decoder whose family takes an attention mask (`models.takes_attention_mask`)
reads each prompt once too: a row holds the prompt, then one block per
label (`arrays.shared_prompt_arrays`), each block attending to the prompt
and to itself only (`masks.branch_mask`), at the positions its label's own
row would give it.
Its program is shaped by the task's label count and longest label
(compiled once per task, shared by every seed and every row of the same
config). Other decoders run one row per label.

Letters: N examples, C labels, B batch, T target length, L label length,
R row length.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from zoo import models
from zoo.finetune import arrays as arrays_lib
from zoo.finetune import steps as step_lib
from zoo.finetune.spec import Spec
from zoo.models import masks


def _target_sums(logits, targets, weights):
  """Summed log-probs [B] of the targets [B,T] under logits [B,T,V] at
  positions of weight 1, and their count [B]."""
  logp = jax.nn.log_softmax(logits.astype(jnp.float32))
  pick = jnp.take_along_axis(logp, targets[..., None], -1)[..., 0]
  return jnp.sum(pick * weights, -1), jnp.sum(weights, -1)


@functools.partial(jax.jit, static_argnums=0)
def target_log_probs(spec: Spec, params, batch: dict):
  """Summed log-probs of each row's targets and their count.

  Returns:
    `(total float32 [B], count float32 [B])` over positions of weight 1.
  """
  return _target_sums(*step_lib.text_logits(spec, params, batch,
                                            deterministic=True))


@functools.partial(jax.jit, static_argnums=0)
def encoded(spec: Spec, params, enc_tokens) -> jax.Array:
  """[B,S,D]: an encoder-decoder's encoder states of enc_tokens [B,S]."""
  model = models.get(spec.family).Model(spec.config)
  return model.apply({"params": params["backbone"]}, enc_tokens,
                     method="encode")["encoder_hidden"]


@functools.partial(jax.jit, static_argnums=0)
def decoded_log_probs(spec: Spec, params, hidden, batch: dict):
  """`target_log_probs` of an encoder-decoder batch over its inputs'
  `encoded` states [B,S,D]: one encoding serves every label's targets."""
  model = models.get(spec.family).Model(spec.config)
  seg = masks.real_segments(batch["enc_tokens"], spec.config.pad_id, None)
  logits = model.apply({"params": params["backbone"]}, batch["dec_tokens"],
                       hidden, enc_segment_ids=seg, method="decode")["logits"]
  return _target_sums(logits, batch["targets"], batch["weights"])


@functools.partial(jax.jit, static_argnums=0)
def shared_log_probs(spec: Spec, params, batch: dict):
  """Summed log-probs of every label's targets in a batch of
  `arrays.shared_prompt_arrays` rows, and their count.

  Returns:
    `(total float32 [B, C], count float32 [B, C])` over positions of
    weight 1.
  """
  model = models.get(spec.family).Model(spec.config)
  logits = model.apply({"params": params["backbone"]}, batch["tokens"],
                       segment_ids=batch["segment_ids"],
                       positions=batch["positions"],
                       mask=masks.branch_mask(batch["blocks"]),
                       logits_at=batch["logits_at"])["logits"]
  b, k, t = batch["targets"].shape
  return _target_sums(logits.reshape(b, k, t, -1), batch["targets"],
                      batch["weights"])


def _scores(sums, length_norm: bool) -> np.ndarray:
  """float32 [...]: summed log-probs, or their mean per target piece."""
  total, count = jax.device_get(sums)
  return total / np.maximum(count, 1.0) if length_norm else total


def _row_scores(spec: Spec, params, columns: list[dict], batch_size: int,
                length_norm: bool) -> np.ndarray:
  """float32 [N, C]: each row's score in each column's arrays (one label's
  targets each), in fixed-size batches; an encoder-decoder encodes each
  batch of inputs once for all columns."""
  keys = [k for k in columns[0] if k != "prompt"]
  out = []
  for parts in zip(*(arrays_lib.chunks(a, keys, batch_size)
                     for a in columns)):
    real = parts[0][0]
    if spec.interface == "encdec":
      hidden = encoded(spec, params, parts[0][1]["enc_tokens"])
      sums = [decoded_log_probs(spec, params, hidden, b) for _, b in parts]
    else:
      sums = [target_log_probs(spec, params, b) for _, b in parts]
    out.append(np.stack([_scores(x, length_norm)[:real] for x in sums], 1))
  return np.concatenate(out)


def _shares_prompt(spec: Spec) -> bool:
  """Whether a decoder reads every label string after one copy of the
  prompt (`shared_log_probs`)."""
  return (spec.interface == "decoder"
          and models.takes_attention_mask(spec.family))


def _shared_scores(spec: Spec, params, examples: list[dict],
                   labels: list[str], tokenizer, lengths: dict,
                   batch_size: int, length_norm: bool) -> np.ndarray:
  """float32 [N, C]: `label_scores` of a decoder that shares its prompt."""
  arrays = arrays_lib.shared_prompt_arrays(
      examples, labels, tokenizer,
      prompt_len=lengths["inputs"] - lengths["targets"],
      targets_len=lengths["targets"])
  out = [_scores(shared_log_probs(spec, params, b), length_norm)[:real]
         for real, b in arrays_lib.chunks(arrays, list(arrays), batch_size)]
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
  if _shares_prompt(spec):
    return _shared_scores(spec, params, examples, labels, tokenizer, lengths,
                          batch_size, length_norm)
  columns = [arrays_lib.split_arrays(
      spec, [dict(ex, targets=label) for ex in examples], tokenizer, lengths)
             for label in labels]
  return _row_scores(spec, params, columns, batch_size, length_norm)


def rank_predictions(spec: Spec, params, examples: list[dict],
                     labels: list[str], tokenizer, lengths: dict,
                     **kw) -> np.ndarray:
  """int32 [N]: the index of each example's best-scoring label."""
  scores = label_scores(spec, params, examples, labels, tokenizer, lengths,
                        **kw)
  return np.argmax(scores, axis=1).astype(np.int32)
