"""The jitted pieces of fine-tuning: backbone call, task heads, loss, steps.

A fine-tuning params tree is `{"backbone": <family params>, "head": <head
params>}` (text-to-text runs have no head). `Spec` is the static, hashable
description of a run, so one compiled train step serves every seed and
every call with the same backbone, task kind and mode.

Letters: B batch, T length, S encoder length, D embed, C classes, L layers.
"""

import functools
from typing import Any

import flax.linen as nn
from flax import traverse_util
import jax
import jax.numpy as jnp
import ml_collections
import optax

from objectives import distill as distill_obj
from zoo import models
from zoo import optim
from zoo.compress import magnitude
from zoo.compress import quant
from zoo.finetune import spec as spec_lib
from zoo.finetune import ulmfit
from zoo.finetune.spec import Spec
from zoo.models import heads


class TaskHead(nn.Module):
  """The head of an encoder task, optionally over a scalar mix of layers.

  Attributes:
    kind: task kind (one of `HEAD_KINDS`).
    num_labels: C.
    pool: "cls", "last" or "mean".
    mix_layers: L+1 to mix `outputs["layers"]`; 0 reads `outputs["hidden"]`.
    dropout_rate: head dropout.
    tagger: "linear" or "bilstm", the head of tags tasks.
    head: "auto" (a dense head on the pooled states) or "ulmfit"
      (`heads.ConcatPoolClassifier`, for class and pair tasks).
    standardize: the "auto" class, pair and regression heads standardise
      the pooled states (`heads.Standardize`).
  """
  kind: str
  num_labels: int
  pool: str = "cls"
  mix_layers: int = 0
  dropout_rate: float = 0.1
  tagger: str = "linear"
  head: str = "auto"
  standardize: bool = False

  @nn.compact
  def __call__(self, outputs: dict, mask: jax.Array,
               answer_mask: jax.Array | None = None,
               deterministic: bool = True):
    """Backbone outputs, mask [B,T] bool -> [B,C], [B], [B,T,C] or spans."""
    if self.mix_layers:
      h = heads.ScalarMix(self.mix_layers, name="mix")(outputs["layers"],
                                                       mask)
    else:
      h = outputs["hidden"]
    kw = dict(pool=self.pool, pre_dense=True, dropout_rate=self.dropout_rate,
              standardize=self.standardize)
    if self.head == "ulmfit":
      return heads.ConcatPoolClassifier(self.num_labels, name="ulmfit")(
          h, mask, deterministic=deterministic)
    if self.kind in ("class", "pair"):
      return heads.SequenceClassifier(self.num_labels, **kw, name="classify")(
          h, mask, deterministic=deterministic)
    if self.kind == "regression":
      return heads.Regressor(1, **kw, name="regress")(
          h, mask, deterministic=deterministic)
    if self.kind == "tags":
      return heads.TokenTagger(self.num_labels, self.tagger,
                               dropout_rate=self.dropout_rate,
                               name="tag")(h, mask, deterministic=deterministic)
    return heads.SpanQA(name="span")(h, answer_mask)


def task_head(spec: Spec, num_labels: int | None = None) -> TaskHead:
  """The `TaskHead` of a spec: `spec.head_width` outputs (or `num_labels`:
  the task's own C, to draw a head's init as `padded_head` then widens)."""
  mix = spec.num_states if spec.mode == "scalar_mix" else 0
  width = spec.head_width if num_labels is None else num_labels
  return TaskHead(spec.kind, width, spec.pool, mix, spec.head_dropout,
                  spec.tagger, spec.head, spec.standardize)


# The output layer of each class and tag head ({head name: layer name}).
_OUTPUT_LAYERS = {"classify": "out", "tag": "out", "ulmfit": "dense_1"}


def _widened(x: jax.Array, width: int, value: float) -> jax.Array:
  """x [..., C] with columns of `value` appended up to [..., width]."""
  extra = width - x.shape[-1]
  return jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, extra)],
                 constant_values=value)


def padded_head(head: dict, width: int) -> dict:
  """A class or tag head's params of C outputs widened to `width`: the
  classes past C get zero weights and an `ABSENT_LOGIT` bias (exp of it is
  exactly 0 in float32, so they take no probability and no gradient, and
  their weights never move). Other heads come back as they are.

  Args:
    head: the head's params, output layer kernel [..., C] and bias [C].
    width: W >= C.
  """
  name = next((n for n in _OUTPUT_LAYERS if n in head), None)
  if name is None:
    return head
  layer = head[name][_OUTPUT_LAYERS[name]]
  if layer["bias"].shape[-1] == width:
    return head
  kernel = _widened(layer["kernel"], width, 0.0)
  bias = _widened(layer["bias"], width, spec_lib.ABSENT_LOGIT)
  out = {**head[name], _OUTPUT_LAYERS[name]: {**layer, "kernel": kernel,
                                               "bias": bias}}
  return {**head, name: out}


def _backbone_call(spec: Spec, params, batch: dict, deterministic: bool,
                   rng, stats=None, mutable=False):
  """`model.apply` of the backbone on an encoder batch; with `spec.quant`,
  fake-quantised with the "quant_stats" `stats` (updated when `mutable`)."""
  model = models.get(spec.family).Model(spec.config)
  rngs = None if deterministic else {"dropout": rng}
  kw = {"deterministic": deterministic}
  if spec.interface != "lstm":
    kw["return_logits"] = False
  if models.reads_token_types(spec.family, spec.config) and (
      "token_types" in batch):
    kw["token_types"] = batch["token_types"]
  if "sentence_ids" in batch:  # a family that reads sentence by sentence
    kw["segment_ids"] = batch["sentence_ids"]
  if spec.quant is None:
    return model.apply({"params": params}, batch["tokens"], rngs=rngs, **kw)
  variables = {"params": params}
  if stats is not None:
    variables[quant.STATS] = stats
  with quant.fake_quantized(spec.quant):
    return model.apply(variables, batch["tokens"], rngs=rngs,
                       mutable=mutable, **kw)


def backbone_outputs(spec: Spec, params, batch: dict, *, deterministic: bool,
                     rng=None, stats=None) -> dict:
  """The backbone's output dict on an encoder batch ("tokens" [B,T], ...);
  quantisation-aware (`spec.quant`) with the ranges `stats`."""
  return _backbone_call(spec, params, batch, deterministic, rng, stats)


def updated_stats(spec: Spec, params, batch: dict, rng=None):
  """Quantisation-aware fine-tuning: the moving maxima of the backbone's
  matmul inputs after this batch (the train step's dropout), or, without
  `params["quant_stats"]` and `rng`, their first values."""
  backbone_rng = None if rng is None else jax.random.split(rng)[0]
  fixed = rng is None or spec.mode in ("frozen", "scalar_mix")
  _, new = _backbone_call(spec, params["backbone"], batch, fixed,
                          backbone_rng, params.get(quant.STATS),
                          mutable=[quant.STATS])
  return new[quant.STATS]


first_stats = jax.jit(updated_stats, static_argnums=0)


def head_forward(spec: Spec, params, batch: dict, *, deterministic: bool,
                 rng=None, mutable=False):
  """Backbone then head: the head's output on an encoder batch (with
  `mutable` collections, the pair (output, their values))."""
  backbone_rng, head_rng = jax.random.split(rng) if rng is not None else (
      None, None)
  # A frozen backbone is a feature extractor: no dropout inside it.
  frozen = spec.mode in ("frozen", "scalar_mix")
  out = backbone_outputs(spec, params["backbone"], batch,
                         deterministic=deterministic or frozen,
                         rng=backbone_rng, stats=params.get(quant.STATS))
  mask = batch["tokens"] != spec.config.pad_id
  rngs = None if deterministic else {"dropout": head_rng}
  return task_head(spec).apply({"params": params["head"]}, out, mask,
                               batch.get("answer_mask"),
                               deterministic=deterministic, rngs=rngs,
                               mutable=mutable)


@functools.partial(jax.jit, static_argnums=0)
def pooled_features(spec: Spec, params, batch: dict) -> jax.Array:
  """[B,D] float32: the pooled vectors a standardising head
  (`spec.standardize`) reads, before its standardisation."""
  _, sown = head_forward(spec, params, batch, deterministic=True,
                         mutable=["intermediates"])
  return jax.tree_util.tree_leaves(sown)[0]


def _xent(logits, labels, weights):
  """Sum of cross-entropies [..., C] vs int labels, and the weight sum."""
  logp = jax.nn.log_softmax(logits.astype(jnp.float32))
  nll = -jnp.take_along_axis(logp, jnp.maximum(labels, 0)[..., None],
                             -1)[..., 0]
  return jnp.sum(nll * weights), jnp.sum(weights)


def _with_soft_labels(spec: Spec, out, batch: dict, weights, hard):
  """`hard` mixed with the soft-label loss to the teacher's logits in
  `batch["soft_logits"]` (`zoo.finetune.distill`)."""
  # The teacher's [..., C] logits with the head's held-out classes added.
  teacher = _widened(batch["soft_logits"], out.shape[-1],
                     spec_lib.ABSENT_LOGIT)
  soft = distill_obj.soft_target_sums(out, teacher, weights,
                                      spec.temperature)
  soft = soft["loss_sum"] / jnp.maximum(soft["weight_sum"], 1.0)
  return spec.soft_weight * soft + (1.0 - spec.soft_weight) * hard


def head_loss(spec: Spec, params, batch: dict, rng) -> jax.Array:
  """Mean training loss of an encoder head on a batch (mixed with a
  teacher's soft labels when `spec.soft_weight` > 0)."""
  out = head_forward(spec, params, batch, deterministic=False, rng=rng)
  if spec.kind in ("class", "pair", "tags"):
    labels = batch["tags" if spec.kind == "tags" else "label"]
    weights = (labels >= 0).astype(jnp.float32)
    total, count = _xent(out, labels, weights)
    hard = total / jnp.maximum(count, 1.0)
    if spec.soft_weight:
      return _with_soft_labels(spec, out, batch, weights, hard)
    return hard
  if spec.kind == "regression":
    total, count = jnp.sum(jnp.square(out - batch["label"])), out.shape[0]
  else:
    total = 0.0
    for name in ("start", "end"):
      pick = jnp.take_along_axis(out[f"{name}_log_probs"],
                                 batch[name][:, None], 1)
      total -= jnp.sum(pick) / 2
    count = batch["start"].shape[0]
  return total / jnp.maximum(count, 1.0)


def text_logits(spec: Spec, params, batch: dict, *, deterministic: bool,
                rng=None):
  """Teacher-forced logits of a text-to-text batch at its target positions.

  Returns:
    `(logits [B,T,V], targets int32 [B,T], weights float32 [B,T])`: for a
    decoder, T is the K target positions only (not all P+K).
  """
  model = models.get(spec.family).Model(spec.config)
  variables = {"params": params["backbone"]}
  rngs = None if deterministic else {"dropout": rng}
  if spec.interface == "encdec":
    logits = model.apply(variables, batch["enc_tokens"], batch["dec_tokens"],
                         deterministic=deterministic, rngs=rngs)["logits"]
    return logits, batch["targets"], batch["weights"]
  at = batch["target_pos"]
  logits = model.apply(variables, batch["tokens"],
                       segment_ids=batch["segment_ids"], logits_at=at,
                       deterministic=deterministic, rngs=rngs)["logits"]
  return (logits, jnp.take_along_axis(batch["targets"], at, axis=1),
          jnp.take_along_axis(batch["weights"], at, axis=1))


def text_loss(spec: Spec, params, batch: dict, rng) -> jax.Array:
  """Mean token cross-entropy of a text-to-text batch (teacher forcing)."""
  logits, targets, weights = text_logits(spec, params, batch,
                                         deterministic=False, rng=rng)
  total, count = _xent(logits, targets, weights)
  return total / jnp.maximum(count, 1.0)


def trainable(spec: Spec, params) -> Any:
  """A tree of Python bools like `params`: True where the optimizer updates.

  full: everything; frozen and scalar_mix: the head; adapters: the head and
  every backbone param under a path containing "adapter". A head's
  standardisation statistics (`heads.Standardize`) are never trained.
  """
  def every(tree, value):
    return jax.tree_util.tree_map(lambda _: value, tree)
  if spec.mode == "full":
    backbone = every(params["backbone"], True)
  elif spec.mode == "adapters":
    backbone = heads.adapter_mask(params["backbone"], train_head=False)
  else:
    backbone = every(params["backbone"], False)
  out = {"backbone": backbone}
  if "head" in params:
    out["head"] = traverse_util.path_aware_map(
        lambda path, _: "standardize" not in path, params["head"])
  if quant.STATS in params:  # moving ranges: updated, never trained
    out[quant.STATS] = every(params[quant.STATS], False)
  return out


def optimizer(spec: Spec, mask, prune: magnitude.Config | None = None,
              params=None) -> optax.GradientTransformation:
  """AdamW (linear warmup then linear decay, clipping) on trainable params;
  frozen params get no optimizer state at all. `prune` adds gradual
  magnitude pruning of the trainable matrices (`zoo.compress.magnitude`);
  `spec.ulmfit` ULMFiT's recipe (`zoo.finetune.ulmfit`; its layer groups
  read the shapes of `params`)."""
  recipe = spec.ulmfit
  if recipe is not None and recipe.slanted:
    sched = ulmfit.slanted_triangular(spec.lr, spec.steps, recipe.cut_frac,
                                      recipe.ratio)
  else:
    sched = optim.schedule(ml_collections.ConfigDict(dict(
        lr=spec.lr, warmup_steps=spec.warmup_steps, decay="linear")),
                           spec.steps)
  adamw = optax.adamw(
      sched, weight_decay=spec.weight_decay,
      mask=optim.decay_mask)
  if prune is not None:
    adamw = magnitude.prune(adamw, prune)
  labels = jax.tree_util.tree_map(lambda t: "train" if t else "frozen", mask)
  inner = optax.multi_transform({"train": adamw,
                                 "frozen": optax.set_to_zero()}, labels)
  if recipe is not None:
    inner = ulmfit.wrap(recipe, params, inner)
  if spec.head_lr != 1.0:
    inner = optax.chain(inner, scale_head(spec.head_lr))
  return optax.chain(optax.clip_by_global_norm(spec.clip_norm), inner)


def scale_head(factor: float) -> optax.GradientTransformation:
  """Multiplies the updates of the params under "head" by `factor` (the
  head then learns at `factor` x the schedule's rate, decay included)."""
  def update(updates, state, params=None):
    del params
    if "head" not in updates:
      return updates, state
    head = jax.tree_util.tree_map(lambda u: u * factor, updates["head"])
    return dict(updates, head=head), state
  return optax.GradientTransformation(lambda params: optax.EmptyState(),
                                      update)


def init_opt_state(spec: Spec, params,
                   prune: magnitude.Config | None = None):
  """The optimizer state of `optimizer(spec, trainable(spec, params),
  prune)`."""
  return optimizer(spec, trainable(spec, params), prune, params).init(params)


def train_step(spec: Spec, params, opt_state, batch: dict, rng,
               prune: magnitude.Config | None = None):
  """One AdamW step on a batch; returns (params, opt_state, loss). Traced
  inside `train_steps`, which runs it over a stack of batches.

  Frozen params leave the step as they came in (no update is added, so
  they stay bitwise equal), and no gradient flows into them. `prune` (the
  same as `init_opt_state`'s) prunes the trainable matrices as it goes.
  """
  mask = trainable(spec, params)
  loss_fn = text_loss if spec.text_to_text else head_loss

  def objective(p):
    p = jax.tree_util.tree_map(
        lambda x, t: x if t else jax.lax.stop_gradient(x), p, mask)
    return loss_fn(spec, p, batch, rng)

  loss, grads = jax.value_and_grad(objective)(params)
  updates, opt_state = optimizer(spec, mask, prune, params).update(
      grads, opt_state, params)
  new = jax.tree_util.tree_map(lambda p, u, t: p + u if t else p,
                               params, updates, mask)
  if spec.quant is not None:
    new[quant.STATS] = updated_stats(spec, params, batch, rng)
  return new, opt_state, loss


@functools.partial(jax.jit, static_argnums=0, static_argnames="prune")
def train_steps(spec: Spec, params, opt_state, batches: dict, rng, first,
                prune: magnitude.Config | None = None):
  """K train steps in one program: `train_step` scanned over the batches.

  Args:
    batches: each of a batch's arrays stacked, [K, B, ...].
    rng: the run's key; step `first + k` folds its index into it, as a
      loop of single steps would.
    first: int32 [] index of the first of these steps.

  Returns:
    (params, opt_state, losses float32 [K]).
  """
  def body(carry, xs):
    batch, step = xs
    p, o, loss = train_step(spec, *carry, batch,
                            jax.random.fold_in(rng, step), prune)
    return (p, o), loss

  count = jax.tree_util.tree_leaves(batches)[0].shape[0]
  steps = first + jnp.arange(count, dtype=jnp.int32)
  (params, opt_state), losses = jax.lax.scan(body, (params, opt_state),
                                             (batches, steps))
  return params, opt_state, losses


@functools.partial(jax.jit, static_argnums=0)
def _head_output(spec: Spec, params, batch: dict):
  return head_forward(spec, params, batch, deterministic=True)


def logits_step(spec: Spec, params, batch: dict):
  """The head's raw output on an encoder batch, no dropout: [B, C] logits
  of class and pair tasks, [B, T, C] of tags (the task's C classes; the
  head's held-out ones are dropped)."""
  out = _head_output(spec, params, batch)
  if spec.head_width != spec.num_labels:
    out = out[..., :spec.num_labels]
  return out


@functools.partial(jax.jit, static_argnums=0)
def predict_step(spec: Spec, params, batch: dict) -> dict:
  """Head predictions on an encoder batch.

  Returns:
    "label" [B] int32 (class, pair) or float32 (regression); "tags" [B,T]
    int32; or "start", "end" [B] int32 (span, end inclusive).
  """
  out = head_forward(spec, params, batch, deterministic=True)
  if spec.kind in ("class", "pair"):
    return {"label": jnp.argmax(out, -1).astype(jnp.int32)}
  if spec.kind == "regression":
    return {"label": out}
  if spec.kind == "tags":
    return {"tags": jnp.argmax(out, -1).astype(jnp.int32)}
  start, end = heads.best_span(out["start_logits"], out["end_logits"])
  return {"start": start, "end": end}
