"""The T5 family of text-to-text objectives on one encoder-decoder.

The rows of the T5 paper's Tables 4 to 7:

- `t5_span`: span corruption, each span replaced by a sentinel; the target
  lists the spans after their sentinels (density 0.15, mean length 3;
  Tables 6 and 7 vary both).
- `t5_iid`: i.i.d. noise, consecutive noised pieces become one sentinel
  ("replace corrupted spans", Table 5).
- `t5_bert`: BERT-style, 90% [MASK] / 10% random; the target is the
  original text (Tables 4 and 5).
- `t5_mass`: MASS-style, every noised piece [MASK]; target the original.
- `t5_drop`: noised pieces dropped from the input; the target is them.
- `t5_deshuffle`: pieces shuffled within each document; target the
  original (Table 4).
- `t5_prefix_lm`: the prefix LM (Table 4), see `objectives.lm`.

Inputs keep the row's static length; targets get `target_length` (0: an
estimate from the density that fits nearly every row; overflow is cut).
"""

import math

import jax
import jax.numpy as jnp

from objectives import common
from objectives import lm
from objectives import noise
from objectives import register
from objectives import transforms


def original(batch, length):
  """The uncorrupted row as an `emit` stream (the reconstruction target)."""
  doc = batch["doc_ids"]
  return transforms.emit((doc > 0).astype(jnp.int32), batch["tokens"],
                         batch["tokens"], doc, length)


class TextToText(common.Scheme):
  """A T5 objective: noise -> (inputs, targets) -> encoder-decoder loss."""
  interfaces = ("encdec",)
  defaults = {"density": 0.15, "mean_length": 3.0, "target_length": 0}
  model_overrides = {}

  def target_length(self, length):
    """Static decoder length for rows of `length` pieces."""
    if self.options["target_length"]:
      return self.options["target_length"]
    return length

  def noise_mask(self, batch, rng):
    """Hook: [B, L] bool noise (default i.i.d. at `density`, Bernoulli)."""
    ok = noise.eligible(batch["tokens"], self.specials)
    return noise.iid_mask(rng, ok, self.options["density"], exact=False)

  def model_inputs(self, inputs):
    return lm.encdec_inputs(self, inputs["enc"], inputs["dec"])

  def score(self, params, inputs, outputs, rng, deterministic):
    return {"lm": lm.decoder_sums(outputs, inputs["dec"])}


class Sentinels(TextToText):
  """Noise spans -> sentinels in the input, spans after them as target."""

  def target_length(self, length):
    if self.options["target_length"]:
      return self.options["target_length"]
    d, m = self.options["density"], max(self.options["mean_length"], 1.0)
    # Noise, one sentinel per span, and per document an EOS and a final
    # sentinel (documents of ~16+ pieces), with a quarter to spare.
    want = length * d * (1 + 1 / m) * 1.25 + length / 8 + 2
    return min(length, int(math.ceil(want)))

  def corrupt(self, batch, rng):
    mask = self.noise_mask(batch, rng)
    args = (batch["tokens"], mask, batch["doc_ids"], self.specials)
    length = batch["tokens"].shape[1]
    return dict(batch, mask=mask,
                enc=transforms.noise_span_to_unique_sentinel(*args, length),
                dec=transforms.nonnoise_span_to_unique_sentinel(
                    *args, self.target_length(length)))


class SpanCorruption(Sentinels):
  name = "t5_span"

  def noise_mask(self, batch, rng):
    ok = noise.eligible(batch["tokens"], self.specials)
    return noise.span_mask(rng, ok, self.options["density"],
                           self.options["mean_length"])


class IidSentinels(Sentinels):
  name = "t5_iid"
  defaults = {"density": 0.15, "mean_length": 1.0, "target_length": 0}


class Reconstruct(TextToText):
  """Corrupted pieces in place; the target is the whole original row."""
  name = "t5_bert"
  defaults = {"density": 0.15, "mask_rate": 0.9, "random_rate": 0.1,
              "target_length": 0}

  def corrupt(self, batch, rng):
    k_mask, k_swap = jax.random.split(rng)
    mask = self.noise_mask(batch, k_mask)
    tokens = noise.replace_tokens(k_swap, batch["tokens"], mask,
                                  self.specials, self.options["mask_rate"],
                                  self.options["random_rate"])
    length = batch["tokens"].shape[1]
    enc = original(dict(batch, tokens=tokens), length)
    return dict(batch, mask=mask, enc=enc,
                dec=original(batch, self.target_length(length)))


class MassStyle(Reconstruct):
  name = "t5_mass"
  defaults = {"density": 0.15, "mask_rate": 1.0, "random_rate": 0.0,
              "target_length": 0}


class DropTokens(TextToText):
  """Noised pieces leave the input; the target is exactly them."""
  name = "t5_drop"
  defaults = {"density": 0.15, "target_length": 0}

  def target_length(self, length):
    if self.options["target_length"]:
      return self.options["target_length"]
    want = length * self.options["density"] * 1.25 + length / 16 + 2
    return min(length, int(math.ceil(want)))

  def corrupt(self, batch, rng):
    mask = self.noise_mask(batch, rng)
    length = batch["tokens"].shape[1]
    tok, doc = batch["tokens"], batch["doc_ids"]
    return dict(batch, mask=mask,
                enc=transforms.drop_noise_tokens(tok, mask, doc, length),
                dec=transforms.keep_noise_tokens(
                    tok, mask, doc, self.specials, self.target_length(length)))


class Deshuffle(TextToText):
  """Pieces shuffled within each document; the target is the original."""
  name = "t5_deshuffle"
  defaults = {"target_length": 0}

  def corrupt(self, batch, rng):
    length = batch["tokens"].shape[1]
    shuffled = transforms.shuffle_tokens(rng, batch, self.specials)
    return dict(batch, enc=original(shuffled, length),
                dec=original(batch, self.target_length(length)))


class PrefixLM(lm.PrefixLM):
  name = "t5_prefix_lm"
  interfaces = ("encdec",)


_SCHEMES = (SpanCorruption, IidSentinels, Reconstruct, MassStyle,
            DropTokens, Deshuffle, PrefixLM)


def _factory(cls):
  def factory(model, size, specials, **options):
    return cls(model, size, specials, **options)
  factory.__doc__ = cls.__doc__ or f"T5 objective {cls.name}."
  factory.__name__ = cls.name
  return factory


_FACTORIES = {cls.name: _factory(cls) for cls in _SCHEMES}
for _name, _fn in _FACTORIES.items():
  register(_name)(_fn)

# `t5` names the paper's chosen objective, span corruption (an alias: the
# same factory, so `objectives.aliases()` maps it to t5_span).
register("t5")(_FACTORIES[SpanCorruption.name])
