"""Denoising encoder-decoder schemes: `mass` and `bart`.

- mass: a contiguous fragment of about half of each document is masked in
  the encoder input; the decoder predicts only that fragment, at its
  original positions (Song et al. 2019).
- bart: any mix of token masking, token deletion, text infilling (Poisson
  span lengths, zero-length spans included, one [MASK] per span), sentence
  permutation and document rotation; the decoder reconstructs the original
  row (Lewis et al. 2020). The default is the paper's final choice,
  infilling plus permutation.
"""

import jax
import jax.numpy as jnp

from objectives import common
from objectives import lm
from objectives import noise
from objectives import register
from objectives import t5
from objectives import transforms

BART_NOISES = ("mask", "delete", "infill", "permute", "rotate")
_TOKEN_NOISES = ("mask", "delete", "infill")


class Mass(common.Scheme):
  """MASS: mask a fragment in the encoder, predict it in the decoder."""
  name = "mass"
  interfaces = ("encdec",)
  defaults = {"ratio": 0.5, "mask_rate": 0.8, "random_rate": 0.1}

  def corrupt(self, batch, rng):
    o = self.options
    k_frag, k_swap = jax.random.split(rng)
    mask = noise.fragment_mask(k_frag, batch, self.specials, o["ratio"])
    tokens = noise.replace_tokens(k_swap, batch["tokens"], mask,
                                  self.specials, o["mask_rate"],
                                  o["random_rate"])
    doc = batch["doc_ids"]
    length = doc.shape[1]
    where = transforms.positions_from_segments(doc)
    dec = transforms.emit(mask.astype(jnp.int32), batch["tokens"],
                          batch["tokens"], doc, length,
                          extra={"at": where})
    dec["positions"] = jnp.where(dec["segment_ids"] > 0, dec["at"], 0)
    enc = t5.original(dict(batch, tokens=tokens), length)
    return dict(batch, mask=mask, enc=enc, dec=dec)

  def model_inputs(self, inputs):
    return lm.encdec_inputs(self, inputs["enc"], inputs["dec"])

  def score(self, params, inputs, outputs, rng, deterministic):
    return {"lm": lm.decoder_sums(outputs, inputs["dec"])}


class Bart(common.Scheme):
  """BART: document noising, then reconstruction of the original."""
  name = "bart"
  interfaces = ("encdec",)
  defaults = {
      "noises": ("infill", "permute"),  # any of BART_NOISES
      "rate": 0.3,                      # pieces masked, deleted or infilled
      # Mean infilled span length: 3 in the paper (Lewis et al. 2020,
      # section 2.2); the fairseq release's pre-training recipe uses 3.5.
      "poisson_lambda": 3.0,
  }

  def setup(self):
    noises = tuple(self.options["noises"])
    unknown = sorted(set(noises) - set(BART_NOISES))
    if unknown:
      raise ValueError(f"unknown bart noises {unknown}; known: {BART_NOISES}")
    if sum(n in _TOKEN_NOISES for n in noises) > 1:
      raise ValueError(f"bart takes at most one of {_TOKEN_NOISES}, got "
                       f"{noises}")
    self.noises = noises

  def corrupt(self, batch, rng):
    k_perm, k_rot, k_tok = jax.random.split(rng, 3)
    noisy = batch
    if "permute" in self.noises:
      noisy = transforms.permute_sentences(k_perm, noisy, self.specials)
    if "rotate" in self.noises:
      noisy = transforms.rotate_documents(k_rot, noisy, self.specials)
    length = batch["tokens"].shape[1]
    enc, mask = self._token_noise(k_tok, noisy, length)
    return dict(batch, mask=mask, enc=enc, dec=t5.original(batch, length))

  def _token_noise(self, rng, batch, length):
    """The encoder stream after the token-level noise, and its mask."""
    tok, doc = batch["tokens"], batch["doc_ids"]
    ok = noise.eligible(tok, self.specials)
    rate = self.options["rate"]
    if "infill" in self.noises:
      mask, inserts = noise.poisson_span_mask(
          rng, ok, rate, self.options["poisson_lambda"])
      return transforms.noise_span_to_mask(tok, mask, inserts, doc,
                                           self.specials, length), mask
    mask = noise.iid_mask(rng, ok, rate)
    if "delete" in self.noises:
      return transforms.drop_noise_tokens(tok, mask, doc, length), mask
    if "mask" not in self.noises:
      mask = jnp.zeros_like(mask)
    tok = jnp.where(mask, self.specials.mask, tok)
    return t5.original(dict(batch, tokens=tok), length), mask

  def model_inputs(self, inputs):
    return lm.encdec_inputs(self, inputs["enc"], inputs["dec"])

  def score(self, params, inputs, outputs, rng, deterministic):
    return {"lm": lm.decoder_sums(outputs, inputs["dec"])}


@register("mass")
def mass(model, size, specials, **options):
  """MASS: masked fragment in, the fragment out."""
  return Mass(model, size, specials, **options)


@register("bart")
def bart(model, size, specials, **options):
  """BART denoising; `noises` picks the mix (see `BART_NOISES`)."""
  return Bart(model, size, specials, **options)
