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

from objectives import encdec
from objectives import noise
from objectives import register
from objectives import t5
from objectives import transforms

BART_NOISES = ("mask", "delete", "infill", "permute", "rotate")
_TOKEN_NOISES = ("mask", "delete", "infill")


def fragment_noise(rng, batch, specials, o):
  """One contiguous fragment of `ratio` of each document's pieces."""
  return noise.fragment_mask(rng, batch, specials, o["ratio"])


@encdec.budget(encdec.full_length)
def fragment_targets(batch, mask, specials, o, length):
  """The fragment alone, each piece at its position in the document."""
  del specials, o
  doc = batch["doc_ids"]
  where = transforms.positions_from_segments(doc)
  dec = transforms.emit(mask.astype(jnp.int32), batch["tokens"],
                        batch["tokens"], doc, length, extra={"at": where})
  dec["positions"] = jnp.where(dec["segment_ids"] > 0, dec["at"], 0)
  return dec


encdec.denoiser("mass", fragment_noise, t5.replaced_inputs, fragment_targets,
                doc="MASS: a masked fragment in, the fragment out.",
                ratio=0.5, mask_rate=0.8, random_rate=0.1)


@register
class Bart(encdec.Denoiser):
  """BART: document noising, then reconstruction of the original.

  The noise is a document transform (sentence permutation, rotation)
  followed by one token noise on the transformed text; infilling also
  inserts a [MASK] for each zero-length span, which a plain noise mask
  cannot say, so this scheme writes its own `corrupt`.
  """
  name = "bart"
  scoring = "infill"
  defaults = {
      "noises": ("infill", "permute"),  # any of BART_NOISES
      "rate": 0.3,                      # pieces masked, deleted or infilled
      # Mean infilled span length: 3 in the paper (Lewis et al. 2020,
      # section 2.2); the fairseq release's pre-training recipe uses 3.5.
      "poisson_lambda": 3.0,
      "head_chunk": 0,  # as every denoiser's (`encdec.denoiser`)
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
    return dict(batch, mask=mask, enc=enc, dec=encdec.original(batch, length))

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
    return encdec.original(dict(batch, tokens=tok), length), mask
