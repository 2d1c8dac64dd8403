"""Sentence-pair tasks: `nsp` (BERT), `sop` (ALBERT), `structbert`.

Each row yields one pair `[CLS] A [SEP] B [SEP]`, cut at a sentence boundary
inside one of its documents (`objectives.segments`):

- nsp: B follows A (label 0) or is the second segment of the next row in
  the batch (label 1), half each;
- sop: A then B (0) or swapped (1), half each;
- structbert: next (0), swapped (1) or random (2), a third each.

A linear head on the pooled first token (the model's "pooled" where it has
one) classifies the pair. By default the masked LM runs on the same pair
(`mlm_weight` 1.0, as the papers train them); `mlm_weight=0` leaves the
sentence task alone.
"""

import jax
import jax.numpy as jnp

from objectives import common
from objectives import mlm as mlm_lib
from objectives import register
from objectives import segments
from zoo.models import layers

_KINDS = {"nsp": ("next", "random"), "sop": ("next", "swap"),
          "structbert": ("next", "swap", "random")}


def _roll(x):
  return jnp.roll(x, 1, axis=0)


def sentence_pairs(rng, batch, specials, kinds, length):
  """One labelled pair per row.

  Args:
    rng: key.
    batch: the contract dict of [B, L] int32 arrays.
    specials: `objectives.Specials`.
    kinds: tuple of "next", "swap", "random"; label i means kinds[i].
    length: static pair length.

  Returns:
    `segments.build_pair`'s dict plus `label` [B] int32.
  """
  k_cut, k_label = jax.random.split(rng)
  cut = segments.choose_cut(k_cut, batch, specials)
  start, end = segments.doc_bounds(batch, cut, specials)
  other = jax.tree.map(_roll, batch)
  build = {
      "next": lambda: segments.build_pair(
          batch, start, cut - start, batch, cut, end - cut, specials,
          length),
      "swap": lambda: segments.build_pair(
          batch, cut, end - cut, batch, start, cut - start, specials,
          length),
      "random": lambda: segments.build_pair(
          batch, start, cut - start, other, _roll(cut), _roll(end - cut),
          specials, length),
  }
  pairs = [build[k]() for k in kinds]
  b = batch["tokens"].shape[0]
  label = jax.random.randint(k_label, (b,), 0, len(kinds))
  out = pairs[0]
  for i, pair in enumerate(pairs[1:], 1):
    pick = label == i
    out = jax.tree.map(
        lambda x, y, pick=pick: jnp.where(
            pick.reshape((b,) + (1,) * (x.ndim - 1)), y, x), out, pair)
  return dict(out, label=label)


class SentencePair(common.Scheme):
  """A pair classification task, optionally with MLM on the pair."""
  interfaces = ("encoder",)
  defaults = dict(mlm_lib.MLM_DEFAULTS, mlm_weight=1.0)
  model_overrides = {"nsp_head": False}

  def setup(self):
    self.kinds = _KINDS[self.name]
    self.part_weights = {"sentence": 1.0, "mlm": self.options["mlm_weight"]}
    self.head = layers.Dense(len(self.kinds), ("embed", "classes"))
    self.token_types = getattr(self.config, "type_vocab_size", 0) >= 2

  def corrupt(self, batch, rng):
    k_pair, k_mlm = jax.random.split(rng)
    pair = sentence_pairs(k_pair, batch, self.specials, self.kinds,
                          batch["tokens"].shape[1])
    opts = {k: v for k, v in self.options.items() if k != "mlm_weight"}
    tokens, mask = mlm_lib.mask_tokens(k_mlm, pair, self.specials, **opts)
    if not self.options["mlm_weight"]:
      tokens, mask = pair["tokens"], jnp.zeros_like(mask)
    return mlm_lib.gather_predictions(dict(pair, inputs=tokens, mask=mask),
                                      opts["rate"])

  def model_inputs(self, inputs):
    kw = {"segment_ids": inputs["segment_ids"]}
    if self.token_types:
      kw["token_types"] = inputs["token_types"]
    kw["logits_at"] = inputs["logits_at"]
    return (inputs["inputs"],), kw

  def _pooled(self, outputs):
    return outputs["pooled"] if "pooled" in outputs else outputs["hidden"][:, 0]

  def init_heads(self, rng, params, inputs):
    outputs = self.run(params, inputs, None, True)
    return {"sentence": self.head.init(rng, self._pooled(outputs))["params"]}

  def score(self, params, inputs, outputs, rng, deterministic):
    logits = self.head.apply({"params": params["sentence"]},
                             self._pooled(outputs))
    label = inputs["label"]
    parts = {"sentence": common.token_sums(
        logits[:, None], label[:, None], jnp.ones_like(label[:, None]))}
    if self.options["mlm_weight"]:
      parts["mlm"] = mlm_lib.masked_sums(outputs["logits"], inputs)
    return parts


class NextSentence(SentencePair):
  name = "nsp"


class SentenceOrder(SentencePair):
  name = "sop"


class StructBert(SentencePair):
  name = "structbert"


@register("nsp")
def nsp(model, size, specials, **options):
  """BERT's next-sentence prediction (with MLM unless mlm_weight=0)."""
  return NextSentence(model, size, specials, **options)


@register("sop")
def sop(model, size, specials, **options):
  """ALBERT's sentence-order prediction (with MLM unless mlm_weight=0)."""
  return SentenceOrder(model, size, specials, **options)


@register("structbert")
def structbert(model, size, specials, **options):
  """StructBERT's next/previous/random task (with MLM unless mlm_weight=0)."""
  return StructBert(model, size, specials, **options)
