"""Scoring a fine-tuned run: head predictions, generated text, metrics.

Letters: N examples, T length, S encoder length.
"""

import functools
from typing import Any

import jax
import numpy as np

from data.tasks import metrics as task_metrics
from zoo import generate
from zoo.finetune import arrays as arrays_lib
from zoo.finetune import rank
from zoo.finetune import steps as step_lib
from zoo.finetune.spec import Spec


def predict_heads(spec: Spec, params, arrays: dict, batch_size: int) -> dict:
  """Head predictions (numpy) of every row of encoder arrays."""
  keys = arrays_lib.input_keys(arrays)
  parts = []
  for real, batch in arrays_lib.chunks(arrays, keys, batch_size):
    out = jax.device_get(step_lib.predict_step(spec, params, batch))
    parts.append({k: v[:real] for k, v in out.items()})
  return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def generate_texts(spec: Spec, params, arrays: dict, tokenizer,
                   targets_len: int, batch_size: int,
                   beams: int = 0) -> list[str]:
  """Generated target strings of every row (greedy, or beam search)."""
  eos = tokenizer.specials()["eos"]
  key = "enc_tokens" if spec.interface == "encdec" else "prompt"
  kw = dict(family=spec.family, config=spec.config, max_len=targets_len,
            eos_id=eos)
  if spec.interface == "encdec":
    kw["start_id"] = getattr(spec.config, "decoder_start_id",
                             spec.config.pad_id)
    fn = generate.greedy_encdec
    if beams > 1:
      fn = functools.partial(generate.beam_encdec, beams=beams)
  elif beams > 1:
    raise ValueError("beam search is implemented for encoder-decoders only")
  else:
    fn = generate.greedy_decoder
  texts = []
  for real, batch in arrays_lib.chunks(arrays, [key], batch_size):
    ids = generate.trim(fn(params["backbone"], batch[key], **kw), eos)
    texts += [tokenizer.decode(row) for row in ids[:real]]
  return texts


SCORINGS = ("rank", "generate")


def _class_task(task) -> bool:
  return task.kind in ("class", "pair")


def evaluate(spec: Spec, params, task, split: str, tokenizer, lengths: dict,
             *, batch_size: int, limit: int | None = None, beams: int = 0,
             scoring: str = "rank") -> tuple[dict[str, float], Any]:
  """The task's metric on one split (its first `limit` examples).

  Text-to-text models are scored on class and pair tasks by rank
  classification over the label strings (`zoo.finetune.rank`), or with
  `scoring="generate"` on the label they generate; other kinds always
  generate.

  Returns:
    `(metrics, predictions)`: predictions are int32 [N] label ids for class
    and pair tasks (-1: a generated text that names no label), else None.
  """
  if scoring not in SCORINGS:
    raise ValueError(f"unknown scoring {scoring!r}; use one of {SCORINGS}")
  examples = task.splits[split][:limit]
  arrays = arrays_lib.split_arrays(spec, examples, tokenizer, lengths)
  gold = [ex.get("label") for ex in examples]
  if spec.text_to_text and _class_task(task) and scoring == "rank":
    preds = rank.rank_predictions(spec, params, examples, task.labels,
                                  tokenizer, lengths, batch_size=batch_size)
    return task_metrics.compute(task.metric, preds.tolist(), gold), preds
  if spec.text_to_text:
    texts = generate_texts(spec, params, arrays, tokenizer,
                           lengths["targets"], batch_size, beams)
    preds = (np.asarray([task.labels.index(t.strip()) if t.strip() in
                         task.labels else -1 for t in texts], np.int32)
             if _class_task(task) else None)
    return text_scores(task, examples, texts), preds
  outputs = predict_heads(spec, params, arrays, batch_size)
  preds = outputs["label"].astype(np.int32) if _class_task(task) else None
  return head_scores(task, examples, arrays, outputs, tokenizer), preds


def head_scores(task, examples: list[dict], arrays: dict, outputs: dict,
                tokenizer) -> dict[str, float]:
  """The task's metric of a head's predictions.

  Args:
    task: the `data.tasks.Task`.
    examples: the N examples predicted.
    arrays: their `encoder_arrays`.
    outputs: numpy predictions: "label" [N] (class ids or real values),
      "tags" [N,T], or "start"/"end" [N].
    tokenizer: decodes predicted answer spans.
  """
  if task.kind in ("class", "pair", "regression"):
    gold = [ex["label"] for ex in examples]
    return task_metrics.compute(task.metric, outputs["label"].tolist(), gold)
  if task.kind == "tags":
    pos = arrays["word_pos"]
    preds, gold = [], []
    for i, ex in enumerate(examples):
      p = pos[i, :len(ex["tags"])]
      preds += np.where(p >= 0, outputs["tags"][i, np.maximum(p, 0)],
                        -1).tolist()
      gold += list(ex["tags"])
    return task_metrics.compute(task.metric, preds, gold)
  texts = [tokenizer.decode(arrays["tokens"][i, s:e + 1])
           for i, (s, e) in enumerate(zip(outputs["start"], outputs["end"]))]
  return task_metrics.compute(task.metric, texts,
                              [ex["answer"] for ex in examples])


def text_scores(task, examples: list[dict], texts: list[str]
                ) -> dict[str, float]:
  """The task's metric of generated target strings.

  Class and pair outputs map to a label index (-1 when the text names no
  label), regression outputs parse as floats (0.0 when they do not), tags
  split on spaces word by word; span and seq2seq compare strings.
  """
  texts = [t.strip() for t in texts]
  if task.kind in ("class", "pair"):
    preds = [task.labels.index(t) if t in task.labels else -1 for t in texts]
    return task_metrics.compute(task.metric, preds,
                                [ex["label"] for ex in examples])
  if task.kind == "regression":
    return task_metrics.compute(task.metric, [_as_float(t) for t in texts],
                                [ex["label"] for ex in examples])
  if task.kind == "tags":
    preds, gold = [], []
    for ex, text in zip(examples, texts):
      words = text.split() + [""] * len(ex["tags"])
      preds += [task.labels.index(w) if w in task.labels else -1
                for w in words[:len(ex["tags"])]]
      gold += list(ex["tags"])
    return task_metrics.compute(task.metric, preds, gold)
  return task_metrics.compute(task.metric, texts,
                              [ex["targets"] for ex in examples])


def _as_float(text: str) -> float:
  try:
    return float(text)
  except ValueError:
    return 0.0
