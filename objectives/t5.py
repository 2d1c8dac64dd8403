"""The T5 family of text-to-text objectives on one encoder-decoder.

The rows of the T5 paper's Tables 4 to 7, each one line combining a noise
function, an inputs function and a targets function (`objectives.encdec`):

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
- `t5_prefix_lm`: each document split at a random point; the prefix in,
  the suffix out (Table 4).

Each scheme names how `zoo.scoring` reads a sentence in its format (the
minimal-pairs view): span formats by sentinel, the BERT- and MASS-style
rows by infilling the original row, dropped pieces, prefix and
deshuffling each by their own.

`t5` names the paper's choice, span corruption. Inputs keep the row's
static length; targets get `target_length` (0: the targets function's
budget, which fits nearly every row; overflow is cut).
"""

import jax.numpy as jnp

from objectives import encdec
from objectives import noise as noise_lib
from objectives import segments
from objectives import transforms

# Noise functions: (rng, batch, specials, options) -> [B, L] bool.


def iid_noise(rng, batch, specials, o):
  """Each eligible piece noised independently with probability `density`."""
  ok = noise_lib.eligible(batch["tokens"], specials)
  return noise_lib.iid_mask(rng, ok, o["density"], exact=False)


def span_noise(rng, batch, specials, o):
  """Spans of mean `mean_length` covering `density` of the pieces."""
  ok = noise_lib.eligible(batch["tokens"], specials)
  return noise_lib.span_mask(rng, ok, o["density"], o["mean_length"])


def suffix_noise(rng, batch, specials, o):
  """Each document's suffix after a uniform split point (EOS excluded)."""
  del o
  prefix = segments.prefix_split(rng, batch, specials)
  return noise_lib.eligible(batch["tokens"], specials) & ~prefix


def no_noise(rng, batch, specials, o):
  """Nothing noised: the inputs function corrupts the whole row."""
  del rng, specials, o
  return jnp.zeros(batch["tokens"].shape, bool)


# Inputs functions: (rng, batch, mask, specials, options, length) -> stream.


def sentinel_inputs(rng, batch, mask, specials, o, length):
  """Each noise span replaced by its sentinel."""
  del rng, o
  return transforms.noise_span_to_unique_sentinel(
      batch["tokens"], mask, batch["doc_ids"], specials, length)


def replaced_inputs(rng, batch, mask, specials, o, length):
  """Noised pieces [MASK] (`mask_rate`) or random (`random_rate`), in place."""
  tokens = noise_lib.replace_tokens(rng, batch["tokens"], mask, specials,
                                    o["mask_rate"], o["random_rate"])
  return encdec.original(dict(batch, tokens=tokens), length)


def dropped_inputs(rng, batch, mask, specials, o, length):
  """Noised pieces removed."""
  del rng, specials, o
  return transforms.drop_noise_tokens(batch["tokens"], mask,
                                      batch["doc_ids"], length)


def shuffled_inputs(rng, batch, mask, specials, o, length):
  """Every document's pieces in a random order (EOS last)."""
  del mask, o
  return encdec.original(transforms.shuffle_tokens(rng, batch, specials),
                         length)


# Targets functions: (batch, mask, specials, options, length) -> stream.


def _sentinel_budget(o, length):
  # Noise, one sentinel per span, and per document an EOS and a final
  # sentinel (documents of ~16+ pieces), with a quarter to spare.
  m = max(o.get("mean_length", 1.0), 1.0)
  return length * o["density"] * (1 + 1 / m) * 1.25 + length / 8 + 2


def _noise_budget(o, length):
  return length * o["density"] * 1.25 + length / 16 + 2


@encdec.budget(_sentinel_budget)
def sentinel_targets(batch, mask, specials, o, length):
  """The noise spans, each after its sentinel; EOS closes each document."""
  del o
  return transforms.nonnoise_span_to_unique_sentinel(
      batch["tokens"], mask, batch["doc_ids"], specials, length)


@encdec.budget(encdec.full_length)
def original_targets(batch, mask, specials, o, length):
  """The uncorrupted row."""
  del mask, specials, o
  return encdec.original(batch, length)


@encdec.budget(_noise_budget)
def noise_targets(batch, mask, specials, o, length):
  """Only the noised pieces, and each document's EOS."""
  del o
  return transforms.keep_noise_tokens(batch["tokens"], mask,
                                      batch["doc_ids"], specials, length)


@encdec.budget(encdec.full_length)
def suffix_targets(batch, mask, specials, o, length):
  """The noised suffix and each document's EOS, at full length."""
  return noise_targets(batch, mask, specials, o, length)


SPAN = encdec.denoiser("t5_span", span_noise, sentinel_inputs,
                       sentinel_targets, density=0.15, mean_length=3.0)
encdec.denoiser("t5_iid", iid_noise, sentinel_inputs, sentinel_targets,
                density=0.15)
encdec.denoiser("t5_bert", iid_noise, replaced_inputs, original_targets,
                scoring="infill", density=0.15, mask_rate=0.9,
                random_rate=0.1)
encdec.denoiser("t5_mass", iid_noise, replaced_inputs, original_targets,
                scoring="infill", density=0.15, mask_rate=1.0,
                random_rate=0.0)
encdec.denoiser("t5_drop", iid_noise, dropped_inputs, noise_targets,
                scoring="dropped", density=0.15)
encdec.denoiser("t5_deshuffle", no_noise, shuffled_inputs, original_targets,
                scoring="deshuffle")
encdec.denoiser("t5_prefix_lm", suffix_noise, dropped_inputs, suffix_targets,
                scoring="prefix")
