"""Fine-tuning and evaluation on the downstream tasks: one recipe for all.

    metrics = finetune("bert", config, params, data.tasks.load("trec"), tok,
                       mode="full", steps=300, batch_size=32, lr=1e-4)
    metrics["validation/accuracy"], metrics["test/accuracy"]

Encoders (BERT-like families, T5 with `encoder_only=True`, ELMo through its
layers) get a head: classes and sentence pairs, regression, per-token tags,
extractive span QA. Encoder-decoders (T5, BART) and decoders (GPT-2) learn
the task text-to-text and are scored on the targets they generate; a
decoder reads `inputs [sep]` and continues with the target, so a pre-trained
decoder serves as the generator.

Modes: "full" trains everything; "frozen" trains only the head; "adapters"
builds the backbone with bottleneck adapters (identity at the start),
loads the pre-trained params around them and trains adapters and head;
"scalar_mix" keeps the backbone frozen and lets the head read a learned
softmax-weighted mix of all its layers. Every run is AdamW with linear
warmup and decay over a fixed number of steps, on fixed-shape batches,
up to `CHUNK_STEPS` steps to a compiled program.
"""

import dataclasses
import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from zoo import checkpoint as ckpt_lib
from zoo import models
from zoo.compress import quant as quant_lib
from zoo.finetune import arrays as arrays_lib
from zoo.finetune import distill as distill_lib
from zoo.finetune import evaluate as evaluate_lib
from zoo.finetune import spec as spec_lib
from zoo.finetune import steps as step_lib
from zoo.finetune import ulmfit as ulmfit_lib
from zoo.finetune.spec import Spec
from zoo.models import heads



@dataclasses.dataclass
class State:
  """What a run leaves besides its metrics.

  Attributes:
    spec: the static run description.
    params: {"backbone": ..., "head": ...} after training (no "head" for
      text-to-text runs).
    losses: the training loss of every step.
    predictions: split -> int32 [N] label ids of class and pair tasks
      (-1: a generated text naming no label).
  """
  spec: Spec
  params: Any
  losses: list[float]
  predictions: dict = dataclasses.field(default_factory=dict)


def _sample_arrays(spec: Spec, max_len: int) -> dict:
  """Arrays of one row, shaped as the backbone's inputs (for init)."""
  one = np.zeros((1, max_len), np.int32)
  if spec.interface == "encdec":
    return {"enc_tokens": one, "dec_tokens": one}
  if spec.interface == "decoder":
    return {"tokens": one, "segment_ids": one + 1}
  return {"tokens": one + 7, "token_types": one}


def _fresh_backbone(spec: Spec, sample: dict, rng):
  """Fresh (unboxed) params of the backbone (traced inside `_fresh`)."""
  # Heads read hidden states: an encoder's pre-training heads (MLM, NSP)
  # are neither built nor trained, so a backbone pre-trained without them
  # (Quick-Thought) loads too, and one with them has them dropped.
  length = sample["enc_tokens" if spec.interface == "encdec" else
                  "tokens"].shape[1]
  return models.init_params(spec.family, spec.config, rng, length,
                            heads=False)


@functools.partial(jax.jit, static_argnums=(0, 1),
                   compiler_options=models.INIT_COMPILER_OPTIONS)
def _fresh(spec: Spec, max_len: int, rng) -> dict:
  """Fresh {"backbone"} params.

  Compiled once per spec and length (init's random ops compile several
  times faster without backend optimisation), then reused by every seed
  and every task of the spec's head width.
  """
  rng_backbone, _ = jax.random.split(rng)
  return {"backbone": _fresh_backbone(spec, _sample_arrays(spec, max_len),
                                      rng_backbone)}


@functools.partial(jax.jit, static_argnums=(0, 1, 2),
                   compiler_options=models.INIT_COMPILER_OPTIONS)
def _fresh_head(spec: Spec, num_labels: int, max_len: int, rng) -> dict:
  """A fresh head of an encoder task: drawn at the task's C = `num_labels`
  outputs (the draws do not depend on the padding), then widened to
  `spec.head_width` (`steps.padded_head`). Only the backbone outputs'
  shapes are traced, not its computation."""
  _, rng_head = jax.random.split(rng)
  sample = _sample_arrays(spec, max_len)
  batch = dict(sample, answer_mask=sample["tokens"] > 0)
  shapes = jax.eval_shape(lambda: step_lib.backbone_outputs(
      spec, _fresh_backbone(spec, sample, rng), batch, deterministic=True))
  outputs = jax.tree_util.tree_map(lambda x: jnp.zeros(x.shape, x.dtype),
                                   shapes)
  head = step_lib.task_head(spec, num_labels).init(
      rng_head, outputs, batch["tokens"] > 0, batch["answer_mask"])
  return step_lib.padded_head(nn.meta.unbox(head["params"]),
                              spec.head_width)


def load_backbone(fresh, given):
  """`given` params placed into the tree of `fresh` (the built backbone).

  Params under an "adapter" or "pal_" path that `given` lacks keep their
  fresh (identity) init; params of `given` that the built backbone does not use
  (a T5 decoder under an encoder-only config) are dropped. Any other
  missing param or any shape mismatch is an error.
  """
  flat_fresh = traverse_util.flatten_dict(fresh)
  flat_given = traverse_util.flatten_dict(nn.meta.unbox(given))
  out, missing = {}, []
  for key, value in flat_fresh.items():
    if key in flat_given:
      got = jnp.asarray(flat_given[key], jnp.float32)
      if got.shape != value.shape:
        raise ValueError(f"param {'/'.join(key)} has shape {got.shape}; the "
                         f"backbone expects {value.shape}")
      out[key] = got
    elif any("adapter" in k or k.startswith("pal_") for k in key):
      out[key] = value
    else:
      missing.append("/".join(key))
  if missing:
    raise ValueError(f"params lack {len(missing)} backbone params, e.g. "
                     f"{missing[:3]}; were they made for another config?")
  return traverse_util.unflatten_dict(out)


def init_params(spec: Spec, backbone_params, max_len: int, rng):
  """{"backbone", "head"} params: loaded (or fresh) backbone, fresh head."""
  fresh = _fresh(spec, max_len, rng)
  if not spec.text_to_text:
    fresh["head"] = _fresh_head(spec, spec.num_labels, max_len, rng)
  if backbone_params is not None:
    fresh["backbone"] = load_backbone(fresh["backbone"], backbone_params)
  return fresh


def train_arrays(spec: Spec, task, tokenizer, lengths: dict) -> dict:
  """Train-split arrays; span rows whose answer is cut off are dropped."""
  arrays = arrays_lib.split_arrays(spec, task.train, tokenizer, lengths)
  if spec.kind == "span" and not spec.text_to_text:
    keep = arrays["start"] >= 0
    if not keep.any():
      raise ValueError(f"no train answer of {task.name} fits in max_len "
                       f"{lengths['inputs']}")
    arrays = {k: v[keep] for k, v in arrays.items()}
  return arrays


def placed(params, opt_state):
  """Params and optimizer state committed whole to the devices of the
  backbone's placed params (else this process's first device), as the
  train step returns them. jit keys a program by its inputs' placement: a
  fresh head or optimizer state left uncommitted would compile the step
  once for the first call and again for every later one."""
  mesh = next((x.sharding.mesh for x in jax.tree_util.tree_leaves(params)
               if isinstance(getattr(x, "sharding", None),
                             jax.sharding.NamedSharding)), None)
  return jax.device_put((params, opt_state), ckpt_lib.replicated(mesh))


# The most steps one compiled program runs (`step_lib.train_steps`): a
# run's stacked batches stay small however many steps it takes.
CHUNK_STEPS = 64


def _chunks(steps: int, most: int) -> list[int]:
  """`steps` split into as few near-equal runs of at most `most` as fit:
  at most two distinct lengths, so at most two compiled programs."""
  count = -(-steps // most)
  size, extra = divmod(steps, count)
  return [size + 1] * extra + [size] * (count - extra)


def batch_rows(n: int, steps: int, batch_size: int, seed: int) -> np.ndarray:
  """int [steps, batch_size]: the rows each step's batch reads, passes
  over all n rows in an order drawn anew from `seed` for each pass."""
  order = np.random.default_rng(seed)
  need = steps * batch_size
  index = np.concatenate([order.permutation(n)
                          for _ in range(-(-need // n))])[:need]
  return index.reshape(steps, batch_size)


def train_keys(arrays: dict) -> list[str]:
  """The keys of the arrays a train step reads."""
  return [k for k in arrays if k not in ("word_pos", "prompt")]


def _train(spec: Spec, params, arrays: dict, batch_size: int, seed: int,
           prune=None):
  """Runs `spec.steps` train steps; returns (params, losses)."""
  keys = train_keys(arrays)
  index = batch_rows(len(arrays[keys[0]]), spec.steps, batch_size, seed)
  params, opt_state = placed(params,
                             step_lib.init_opt_state(spec, params, prune))
  rng = jax.random.key(seed)
  losses, first = [], 0
  for count in _chunks(spec.steps, CHUNK_STEPS):
    batches = {k: arrays[k][index[first:first + count]] for k in keys}
    params, opt_state, chunk = step_lib.train_steps(
        spec, params, opt_state, batches, rng, np.int32(first), prune=prune)
    losses.append(chunk)
    first += count
  return params, [float(x) for x in np.concatenate(jax.device_get(losses))]


def _quantized(spec: Spec, state: dict, arrays: dict, batch_size: int,
               config):
  """The spec and params of quantisation-aware fine-tuning: first ranges
  measured on the first training batch."""
  if spec.interface != "encoder":
    raise ValueError(f"quantisation-aware fine-tuning runs encoders with a "
                     f"head; {spec.family} is an {spec.interface} (planned)")
  spec = dataclasses.replace(spec, quant=config)
  batch = {k: arrays[k][:batch_size] for k in ("tokens", "token_types")
           if k in arrays}
  stats = step_lib.first_stats(spec, state, batch)
  return spec, dict(state, **{quant_lib.STATS: stats})


def _standardized(spec: Spec, state: dict, arrays: dict,
                  batch_size: int) -> dict:
  """`state` with its head's standardisation set to the moments of the
  pooled features of every training example (`spec.standardize`)."""
  n = len(arrays["tokens"])
  rows = np.arange(-(-n // batch_size) * batch_size) % n  # whole batches
  keys = arrays_lib.input_keys(arrays)
  parts = [step_lib.pooled_features(
      spec, state, {k: arrays[k][rows[i:i + batch_size]] for k in keys})
           for i in range(0, len(rows), batch_size)]
  mean, std = heads.moments(np.concatenate(jax.device_get(parts))[:n])
  values = {"mean": mean, "scale": 1.0 / std}
  head = traverse_util.path_aware_map(
      lambda path, x: jnp.asarray(values[path[-1]])
      if "standardize" in path else x, state["head"])
  return dict(state, head=head)


def finetune(family: str, config, params, task, tokenizer, *,
             mode: str = "full", seed: int = 0, steps: int = 100,
             batch_size: int = 16, lr: float = 1e-4, max_len: int = 128,
             max_target_len: int = 32, warmup_steps: int | None = None,
             weight_decay: float = 0.01, adapter_dim: int = 16,
             pool: str = "auto", tagger: str = "linear",
             splits: tuple[str, ...] = ("validation", "test"),
             eval_limit: int | None = None, beams: int = 0,
             scoring: str = "rank", teacher: "State | None" = None,
             soft_weight: float = 1.0, temperature: float = 1.0,
             prune=None, quant=None, ulmfit=None, head: str = "auto",
             head_lr: float = 1.0, standardize: bool = False,
             return_state: bool = False):
  """Fine-tunes a backbone on a task and scores it.

  Args:
    family: model family name (`zoo.models.FAMILIES`).
    config: the backbone's `Config` (vocab_size >= the tokenizer's).
    params: the backbone's params (boxed or not), or None for a random
      init (the "no pre-training" baseline).
    task: a `data.tasks.Task`.
    tokenizer: the tokenizer the backbone was pre-trained with.
    mode: "full", "frozen", "adapters" or "scalar_mix" (text-to-text
      backbones: "full" or "adapters").
    seed: head init, dropout and batch order.
    steps, batch_size, lr, warmup_steps, weight_decay: the AdamW recipe
      (warmup defaults to 10% of the steps).
    max_len: T of encoder rows, S of encoder-decoder inputs, prompt plus
      target of decoder rows.
    max_target_len: cap on generated/teacher-forced target ids (with eos).
    adapter_dim: adapter bottleneck width in "adapters" mode.
    pool: sequence summary of class, pair and regression heads: "cls",
      "last", "mean", or "auto" (cls for BERT-like encoders, last for
      XLNet, mean for T5's encoder, ELMo, GPT-2 and Transformer-XL). Without NSP the [cls] state of a briefly pre-trained
      encoder carries little, so short comparisons favour "mean".
    tagger: the head of tags tasks: "linear", or "bilstm" (a BiLSTM over
      the backbone's states, as ELMo's taggers).
    splits: the evaluation splits.
    eval_limit: score only the first this many examples of each split.
    beams: >1 decodes encoder-decoders with beam search.
    scoring: how text-to-text models answer class and pair tasks: "rank"
      (the label string of highest likelihood) or "generate".
    teacher: a fine-tuned teacher's `State` on this task: the student
      also learns its soft labels (`zoo.finetune.distill`; TinyBERT's
      task stage).
    soft_weight, temperature: with a teacher, the weight of its soft labels
      against the gold ones (1: soft only) and their temperature T.
    prune: a `zoo.compress.magnitude.Config`: gradual magnitude pruning of
      the trainable matrices while fine-tuning (Zhu & Gupta's schedule).
    quant: a `zoo.compress.quant.QuantConfig`: quantisation-aware
      fine-tuning of an encoder (Q8BERT): its matmuls fake-quantised,
      their input ranges moving maxima kept in the state's
      params["quant_stats"] (first set on the first training batch; each
      step updates them with one more forward), evaluation with them
      frozen. `zoo.compress.quant.quantize_params(params["backbone"],
      params["quant_stats"])` then exports the int8 backbone.
    ulmfit: a `zoo.finetune.ulmfit.Recipe`: ULMFiT's discriminative
      rates (each layer group below at lr / 2.6), slanted triangular
      schedule and gradual unfreezing, for any family (a dict of its
      fields is taken too).
    head: class and pair heads: "auto" (the family's own: a dense head on
      an encoder's pooled states, text-to-text for decoders and
      encoder-decoders) or "ulmfit" (ULMFiT's concat-pooling classifier,
      `zoo.models.heads.ConcatPoolClassifier`, on an encoder's or a
      decoder's states).
    head_lr: the head's learning rate over the backbone's (`lr`): a
      fresh head on a pre-trained backbone may need a larger one.
    standardize: the class, pair or regression head standardises its
      pooled features by their mean and std over the training examples,
      measured once before the first step (through the backbone as
      loaded) and kept fixed, as the frozen probe does. Mean-pooled static
      vectors share one large direction and differ little from text to
      text; standardised, a few-shot head can read them.
    return_state: also return a `State`.

  Returns:
    {"<split>/<metric>": float, ..., "train/loss": mean loss of the last
    10% of steps}; with `return_state`, `(metrics, State)`.
  """
  spec = spec_lib.make_spec(family, config, task, mode=mode, steps=steps,
                            lr=lr, warmup_steps=warmup_steps,
                            weight_decay=weight_decay,
                            adapter_dim=adapter_dim, pool=pool,
                            tagger=tagger, head=head)
  spec = dataclasses.replace(spec, head_lr=float(head_lr),
                             standardize=bool(standardize),
                             pad_labels=prune is None)
  if ulmfit is not None:
    if isinstance(ulmfit, dict):
      ulmfit = ulmfit_lib.Recipe(**ulmfit)
    spec = dataclasses.replace(spec, ulmfit=ulmfit)
  # Targets pad to the cap (greedy decoding stops at eos anyway), so the
  # compiled train and generate steps do not depend on the task.
  lengths = {"inputs": max_len, "targets": max_target_len}
  spec_lib.check(spec, tokenizer, lengths)
  state = init_params(spec, params, max_len, jax.random.key(seed))
  arrays = train_arrays(spec, task, tokenizer, lengths)
  if teacher is not None:
    spec = dataclasses.replace(spec, soft_weight=float(soft_weight),
                               temperature=float(temperature))
    distill_lib.check(spec, teacher)
    arrays["soft_logits"] = distill_lib.soft_logits(teacher, arrays,
                                                    batch_size)
  if quant is not None:
    spec, state = _quantized(spec, state, arrays, batch_size, quant)
  if spec.standardize:
    state = _standardized(spec, state, arrays, batch_size)
  state, losses = _train(spec, state, arrays, batch_size, seed, prune)
  metrics = {"train/loss": float(np.mean(losses[-max(1, steps // 10):]))}
  predictions = {}
  for split in splits:
    scores, predictions[split] = evaluate_lib.evaluate(
        spec, state, task, split, tokenizer, lengths, batch_size=batch_size,
        limit=eval_limit, beams=beams, scoring=scoring)
    metrics.update({f"{split}/{k}": v for k, v in scores.items()})
  if return_state:
    return metrics, State(spec, state, losses, predictions)
  return metrics
