"""What every scheme shares: binding a model, token losses, the step skeleton.

A scheme subclasses `Scheme` and fills three hooks:

- `corrupt(batch, rng) -> inputs`: the scheme's noise, a dict of arrays;
- `model_inputs(inputs) -> (args, kwargs)`: the model call;
- `score(params, inputs, outputs, rng, deterministic) -> parts`: a dict
  part name -> sums (`loss_sum`, `weight_sum`, `correct_sum`).

Schemes with their own heads or several model calls also override `setup`
(checks and state once the model is bound), `init_heads` and `run` (the
model calls; by default one call with `model_inputs`). Encoder-decoder
schemes need none of this: `objectives.encdec.denoiser` builds them from a
noise, an inputs and a targets function.

`loss` then returns `(sum_p weight_p * loss_sum_p / weight_sum_p, metrics)`
where metrics hold the first part's sums under plain names and every
part's under `<part>_loss_sum`, ... Params are `{"model": ..., <head>: ...}`.
"""

import dataclasses
import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

import objectives
from data import batch as batch_lib
from objectives import head_loss
from objectives import noise as noise_lib
from zoo import models

Array = jax.Array


def take_options(name, options, defaults):
  """`defaults` updated by `options`; unknown option names are an error."""
  unknown = sorted(set(options) - set(defaults))
  if unknown:
    raise ValueError(f"objective {name!r} has no options {unknown}; "
                     f"options: {sorted(defaults)}")
  return dict(defaults, **options)


def token_sums(logits, targets, weights):
  """Cross-entropy sums of token predictions.

  Args:
    logits: [B, T, V] float.
    targets: [B, T] int32.
    weights: [B, T] bool or float, 0 where nothing is predicted.

  Returns:
    dict of float32 scalars `loss_sum`, `weight_sum`, `correct_sum`.
  """
  logits = logits.astype(jnp.float32)
  true = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
  # One max serves the log-sum-exp and the accuracy: a hit is a target
  # logit at the maximum (an exact tie counts as a hit). An argmax here
  # is a two-output reduce over [B, T, V], several times slower on CPU.
  top = jax.lax.stop_gradient(logits.max(axis=-1))
  nll = top + jnp.log(jnp.exp(logits - top[..., None]).sum(axis=-1)) - true
  w = weights.astype(jnp.float32)
  hit = (true >= top).astype(jnp.float32)
  return {"loss_sum": (nll * w).sum(), "weight_sum": w.sum(),
          "correct_sum": (hit * w).sum()}


def prediction_budget(rate, length):
  """Static K: a bound on the positions a masking rate noises in a row.

  `noise.iid_mask` and `noise.unit_mask` noise at most
  max(1, round(rate * n)) of a row's n <= length eligible pieces; one more
  covers float32 rounding of rate * n.

  Args:
    rate: fraction of pieces noised.
    length: T, the row length.

  Returns:
    int K, 1 <= K <= T.
  """
  return max(1, min(length, math.ceil(rate * length) + 1))


def prediction_positions(mask, k):
  """The noised positions of each row first, as K static slots.

  A head that predicts only noised pieces runs on these K positions instead
  of all T (`logits_at` of the encoder families).

  Args:
    mask: [B, T] bool noised positions, at most K per row.
    k: static K <= T.

  Returns:
    ([B, K] int32 positions: the noised ones in order, then unnoised
    fillers; [B, K] bool, True on the noised ones).
  """
  at = jnp.argsort(~mask, axis=-1, stable=True)[:, :k].astype(jnp.int32)
  return at, jnp.take_along_axis(mask, at, axis=-1)


def binary_sums(scores, labels, weights):
  """Sigmoid cross-entropy sums; scores [B, T] float, labels [B, T] bool."""
  scores = scores.astype(jnp.float32)
  nll = optax.sigmoid_binary_cross_entropy(scores,
                                          labels.astype(jnp.float32))
  w = weights.astype(jnp.float32)
  hit = ((scores > 0) == labels).astype(jnp.float32)
  return {"loss_sum": (nll * w).sum(), "weight_sum": w.sum(),
          "correct_sum": (hit * w).sum()}


def combine(parts, weights):
  """`(loss, metrics)` from part sums and per-part loss weights."""
  loss = 0.0
  metrics = {}
  for i, (name, sums) in enumerate(parts.items()):
    mean = sums["loss_sum"] / jnp.maximum(sums["weight_sum"], 1.0)
    loss = loss + weights.get(name, 1.0) * mean
    for k, v in sums.items():
      metrics[f"{name}_{k}"] = v
      if i == 0:
        metrics[k] = v
  return loss, metrics


def next_token_targets(tokens, segment_ids):
  """Targets and weights for "position t predicts t + 1" within segments.

  Args:
    tokens, segment_ids: [B, T] int32.

  Returns:
    ([B, T] int32 targets, [B, T] bool weights).
  """
  nxt = jnp.concatenate([tokens[:, 1:], jnp.zeros_like(tokens[:, :1])], 1)
  seg = jnp.concatenate([segment_ids[:, 1:],
                         jnp.zeros_like(segment_ids[:, :1])], 1)
  return nxt, (seg == segment_ids) & (segment_ids > 0)


def shift_right(tokens, segment_ids, start_id):
  """Decoder inputs: targets moved right within each segment.

  Args:
    tokens, segment_ids: [B, T] int32 targets and their documents.
    start_id: id entering at each segment's start (T5: pad 0).

  Returns:
    [B, T] int32.
  """
  prev = jnp.concatenate([jnp.zeros_like(tokens[:, :1]), tokens[:, :-1]], 1)
  first = noise_lib.doc_starts(segment_ids)
  return jnp.where(segment_ids > 0, jnp.where(first, start_id, prev), 0)


def as_batch(batch):
  """The contract's arrays (`data.batch`) as int32 jnp arrays, the optional
  ones filled by `data.batch.with_defaults` where missing; a speech batch
  (`SPEECH_KEYS`) keeps its float32 frames."""
  if "features" in batch:
    out = {k: jnp.asarray(batch[k], jnp.int32)
           for k in batch_lib.SPEECH_KEYS[1:] if k in batch}
    return dict(out, features=jnp.asarray(batch["features"], jnp.float32))
  out = {k: jnp.asarray(batch[k], jnp.int32) for k in batch_lib.KEYS
         if k in batch}
  return batch_lib.with_defaults(out, jnp)


def config_fields(family):
  """Names of a family's Config fields."""
  return {f.name for f in dataclasses.fields(models.get(family).Config)}


class Scheme(objectives.Objective):
  """A scheme bound to one model: options, model, the step skeleton.

  Subclasses set `name`, `interfaces` (model INTERFACE values accepted),
  `defaults` (option -> default) and implement the hooks of the module
  docstring. `model_args` (a dict of Config overrides) is an option of every
  scheme.
  """
  name = ""
  interfaces: tuple[str, ...] = ()
  defaults: dict[str, Any] = {}
  part_weights: dict[str, float] = {}
  model_overrides: dict[str, Any] = {}  # applied where the family has them

  def __init__(self, model, size, specials, model_args=None, **options):
    self.family, self.size, self.specials = model, size, specials
    self.options = take_options(self.name, options, self.defaults)
    chunk = self.options.get("head_chunk", 0)
    if not isinstance(chunk, int) or isinstance(chunk, bool) or chunk < 0:
      raise ValueError(f"objective {self.name!r}: head_chunk must be a "
                       f"whole number of positions >= 0; got {chunk!r}")
    args = self.overrides_for(model)
    args.update(model_args or {})
    self.config, self.model = models.make(
        model, size, vocab_size=specials.vocab_size, **args)
    self.interface = self._interface(model)
    self.setup()

  @classmethod
  def overrides_for(cls, family: str) -> dict[str, Any]:
    """The scheme's `model_overrides` that family `family`'s Config has."""
    fields = config_fields(family)
    return {k: v for k, v in cls.model_overrides.items() if k in fields}

  def _interface(self, family):
    face = models.interface_of(family, self.config)
    if face not in self.interfaces:
      raise ValueError(
          f"objective {self.name!r} needs a model with interface in "
          f"{self.interfaces}; {self.family!r} is {face!r}")
    return face

  def setup(self):
    """Hook: extra state after the model is bound (heads, checks)."""

  def apply(self, params, *args, rng=None, deterministic=True, **kw):
    """The model's output dict for `params["model"]`."""
    rngs = {} if rng is None else {"dropout": rng}
    return self.model.apply({"params": params["model"]}, *args,
                            deterministic=deterministic, rngs=rngs, **kw)

  def init(self, rng, batch):
    """Boxed params `{"model": ..., <head>: ...}` for the batch's shapes."""
    k_model, k_heads, k_noise = jax.random.split(rng, 3)
    inputs = self.corrupt(as_batch(batch), k_noise)
    params = {"model": self.init_model(k_model, inputs)}
    params.update(self.init_heads(k_heads, params, inputs))
    return params

  def init_model(self, rng, inputs):
    """Hook: the model's boxed params (default: from `model_inputs`, the
    LM head's included where `fuses_head` runs it outside the call)."""
    args, kw = self.model_inputs(inputs)
    if self.fuses_head:
      kw.pop("return_logits", None)
    return self.model.init({"params": rng, "dropout": rng}, *args,
                           deterministic=True, **kw)["params"]

  def model_inputs(self, inputs):
    """Hook: `(args, kwargs)` of the model call used by `init_model`."""
    raise TypeError(f"scheme {type(self).__name__} must define model_inputs "
                    "or override init_model")

  def init_heads(self, rng, params, inputs):
    """Hook: boxed params of the scheme's own heads (default none)."""
    return {}

  def run(self, params, inputs, rng, deterministic):
    """Hook: the model outputs (default: one call with `model_inputs`)."""
    args, kw = self.model_inputs(inputs)
    return self.apply(params, *args, rng=rng, deterministic=deterministic,
                      **kw)

  @property
  def fuses_head(self) -> bool:
    """Whether `head_sums` runs the LM head through `head_loss`: option
    `head_chunk` > 0 and a family with `lm_logits`. The model call then
    asks for no logits (`return_logits=False`)."""
    return (self.options.get("head_chunk", 0) > 0
            and hasattr(self.model, "lm_logits"))

  def head_sums(self, params, outputs, targets, weights):
    """`token_sums` of the LM head at every position [B, T]: of
    `outputs["logits"]`, or of the family's `lm_logits` over
    `outputs["hidden"]` `head_chunk` positions at a time (`fuses_head`).
    `params` are unboxed."""
    if not self.fuses_head:
      return token_sums(outputs["logits"], targets, weights)
    head = lambda p, h: self.model.apply({"params": p}, h, method="lm_logits")
    return head_loss.token_sums(head, params["model"], outputs["hidden"],
                                targets, weights, self.options["head_chunk"])

  def loss(self, params, batch, rng, deterministic=False):
    """`(loss, metrics)` of one step; see the module docstring."""
    params = nn.meta.unbox(params)
    k_noise, k_drop, k_score = jax.random.split(rng, 3)
    inputs = self.corrupt(as_batch(batch), k_noise)
    outputs = self.run(params, inputs, k_drop, deterministic)
    parts = self.score(params, inputs, outputs, k_score, deterministic)
    return combine(parts, self.part_weights)

  def backbone(self, params):
    """`(family, config, params)` of the bound model."""
    return self.family, self.config, nn.meta.unbox(params)["model"]
