"""Sentence-pair tasks: `nsp` (BERT), `sop` (ALBERT), `structbert`.

Each row yields one pair `[CLS] A [SEP] B [SEP]`, cut at a sentence boundary
inside one of its documents (`objectives.segments`):

- nsp: B follows A (label 0) or is a segment of another document (label
  1), half each;
- sop: A then B (0) or swapped (1), half each;
- structbert: next (0), swapped (1) or random (2), a third each.

A "random" B is the second segment of another row of the batch whose
document differs (`doc_keys`: packing cuts one document into several
consecutive rows, so a neighbouring row is often the same text). A row for
which the batch holds no other document gets label 0 instead: a negative
never shares A's document. Concat-and-split batches of few, long rows can
be a single document (16 rows of 64 pieces of the sample often are), and
then hold no negatives; larger batches, or the planned stream loader (one
document stream per row), give the task its balance.

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


def other_documents(keys):
  """For each row, the nearest later row (cyclically) of another document.

  Args:
    keys: [B] int32, each row's chosen document (`doc_keys` at its cut).

  Returns:
    ([B] int32 partner row, [B] bool whether one exists).
  """
  b = keys.shape[0]
  if b == 1:
    return jnp.zeros((1,), jnp.int32), jnp.zeros((1,), bool)
  shift = jnp.arange(1, b)  # candidates r+1, ..., r+B-1 (mod B)
  rows = (jnp.arange(b)[:, None] + shift[None, :]) % b  # [B, B-1]
  differs = keys[rows] != keys[:, None]
  first = jnp.argmax(differs, axis=1)
  return rows[jnp.arange(b), first], differs.any(axis=1)


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
  keys = jnp.take_along_axis(batch["doc_keys"], cut[:, None], axis=1)[:, 0]
  partner, has_other = other_documents(keys)
  other = jax.tree.map(lambda x: x[partner], batch)
  build = {
      "next": lambda: segments.build_pair(
          batch, start, cut - start, batch, cut, end - cut, specials,
          length),
      "swap": lambda: segments.build_pair(
          batch, cut, end - cut, batch, start, cut - start, specials,
          length),
      "random": lambda: segments.build_pair(
          batch, start, cut - start, other, cut[partner],
          (end - cut)[partner], specials, length),
  }
  pairs = [build[k]() for k in kinds]
  b = batch["tokens"].shape[0]
  label = jax.random.randint(k_label, (b,), 0, len(kinds))
  if "random" in kinds:  # no other document in the batch: not a negative
    label = jnp.where((label == kinds.index("random")) & ~has_other, 0,
                      label)
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


@register
class NextSentence(SentencePair):
  name = "nsp"


@register
class SentenceOrder(SentencePair):
  name = "sop"


@register
class StructBert(SentencePair):
  name = "structbert"
