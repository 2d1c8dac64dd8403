"""Masked LM: `mlm` (BERT, RoBERTa), `wwm` (whole words), `phrase_mlm`
(ERNIE-style phrases and entities, mixed with piece masking).

A fresh mask every step (RoBERTa's dynamic masking): the noise comes from
the step's rng inside jit. Noised positions become [MASK] 80%, a random
piece 10%, or stay 10%; the loss covers the noised positions only, so the
MLM head runs only there (`gather_predictions`): K = `prediction_budget`
static slots per row instead of all T, which skips most of the V x D
vocabulary projection and its gradient.
"""

import jax
import jax.numpy as jnp

from objectives import common
from objectives import noise
from objectives import register
from objectives import transforms

MLM_DEFAULTS = {
    "rate": 0.15,         # fraction of pieces predicted
    "mask_rate": 0.8,     # of those: replaced by [MASK]
    "random_rate": 0.1,   # of those: replaced by a random piece
    "unit": "token",      # "token" | "word" | "phrase"
}
UNITS = ("token", "word", "phrase")


def mask_tokens(rng, batch, specials, rate=0.15, mask_rate=0.8,
                random_rate=0.1, unit="token"):
  """BERT corruption of a row by pieces, whole words or phrases.

  Args:
    rng: key.
    batch: dict with [B, L] int32 `tokens`, and `word_ids` / `phrase_ids`
      for the word and phrase units.
    specials: `objectives.Specials`.
    rate, mask_rate, random_rate: see `MLM_DEFAULTS`.
    unit: "token", "word" or "phrase" (ERNIE: a whole phrase where
      `phrase_ids` > 0, single pieces elsewhere).

  Returns:
    ([B, L] int32 corrupted tokens, [B, L] bool noised positions), at most
    `common.prediction_budget(rate, L)` noised positions per row.
  """
  if unit not in UNITS:
    raise ValueError(f"unknown masking unit {unit!r}; units: {UNITS}")
  k_mask, k_swap = jax.random.split(rng)
  tokens = batch["tokens"]
  ok = noise.eligible(tokens, specials)
  if unit == "token":
    mask = noise.iid_mask(k_mask, ok, rate)
  else:
    ids = batch["word_ids"]
    if unit == "phrase":  # a piece outside phrases is its own unit
      own = -1 - jnp.broadcast_to(jnp.arange(ids.shape[-1]), ids.shape)
      ids = jnp.where(batch["phrase_ids"] > 0, batch["phrase_ids"], own)
    mask = noise.unit_mask(k_mask, noise.unit_starts(ids, ok), ok, rate)
  out = noise.replace_tokens(k_swap, tokens, mask, specials, mask_rate,
                             random_rate)
  return out, mask


def gather_predictions(inputs, rate):
  """Adds the K prediction slots of `inputs["mask"]` to the inputs.

  Args:
    inputs: dict with [B, T] int32 `tokens` (the targets) and [B, T] bool
      `mask` (noised positions, from `mask_tokens` at `rate`).
    rate: the masking rate, for K = `common.prediction_budget(rate, T)`.

  Returns:
    `inputs` plus `logits_at` [B, K] int32 positions, `targets` [B, K]
    int32 and `weights` [B, K] bool (False on filler slots).
  """
  k = common.prediction_budget(rate, inputs["mask"].shape[-1])
  at, weights = common.prediction_positions(inputs["mask"], k)
  targets = jnp.take_along_axis(inputs["tokens"], at, axis=-1)
  return dict(inputs, logits_at=at, targets=targets, weights=weights)


def masked_sums(logits, inputs):
  """Token sums of MLM logits [B, K, V] at the slots of `gather_predictions`."""
  return common.token_sums(logits, inputs["targets"], inputs["weights"])


@register
class MaskedLM(common.Scheme):
  """BERT's masked LM on any encoder family."""
  name = "mlm"
  interfaces = ("encoder",)
  defaults = MLM_DEFAULTS
  model_overrides = {"nsp_head": False}

  def setup(self):
    if self.options["unit"] not in UNITS:
      raise ValueError(f"unknown masking unit {self.options['unit']!r}; "
                       f"units: {UNITS}")

  def corrupt(self, batch, rng):
    opts = {k: self.options[k] for k in MLM_DEFAULTS}  # subclasses add more
    tokens, mask = mask_tokens(rng, batch, self.specials, **opts)
    return gather_predictions(dict(batch, inputs=tokens, mask=mask),
                              self.options["rate"])

  def model_inputs(self, inputs):
    doc = inputs["doc_ids"]
    return (inputs["inputs"],), {
        "segment_ids": doc,
        "positions": transforms.positions_from_segments(doc),
        "logits_at": inputs["logits_at"]}

  def score(self, params, inputs, outputs, rng, deterministic):
    return {"mlm": masked_sums(outputs["logits"], inputs)}


@register
class WholeWordLM(MaskedLM):
  name = "wwm"
  defaults = dict(MLM_DEFAULTS, unit="word")


@register
class PhraseLM(MaskedLM):
  name = "phrase_mlm"
  defaults = dict(MLM_DEFAULTS, unit="phrase")
