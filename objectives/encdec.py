"""Encoder-decoder schemes: a noise function, an inputs function, a targets
function.

As in T5's preprocessors, a denoising scheme is three small functions:

- noise: `(rng, batch, specials, options) -> [B, L] bool`, the pieces the
  scheme corrupts (`objectives.noise` holds the masks);
- inputs: `(rng, batch, mask, specials, options, length) -> stream`, what
  the encoder reads;
- targets: `(batch, mask, specials, options, length) -> stream`, what the
  decoder predicts, with a static `budget(options, L)`: the target length
  rows of L pieces need (see `budget`).

A stream is the `transforms.emit` dict of `[B, length]` int32 arrays
(`tokens`, `segment_ids`, `positions`). `denoiser(name, noise, inputs,
targets, **defaults)` binds three such functions into a registered scheme in
one line; `objectives.t5` and `objectives.seq2seq` are made of such lines.
"""

import math
import sys

import jax
import jax.numpy as jnp

from objectives import common
from objectives import register
from objectives import transforms


def decoder_start(config):
  """Id entering the decoder first: the config's start id, else pad."""
  for field in ("decoder_start_id", "decoder_start_token_id"):
    if hasattr(config, field):
      return getattr(config, field)
  return config.pad_id


def encdec_inputs(config, enc, dec):
  """`(args, kwargs)` of an encoder-decoder call from two streams."""
  dec_in = common.shift_right(dec["tokens"], dec["segment_ids"],
                              decoder_start(config))
  kw = {"enc_segment_ids": enc["segment_ids"],
        "dec_segment_ids": dec["segment_ids"],
        "enc_positions": enc["positions"],
        "dec_positions": dec["positions"]}
  return (enc["tokens"], dec_in), kw


def original(batch, length):
  """The uncorrupted row as a stream (the reconstruction target)."""
  doc = batch["doc_ids"]
  return transforms.emit((doc > 0).astype(jnp.int32), batch["tokens"],
                         batch["tokens"], doc, length)


def budget(estimate):
  """Decorator: gives a targets function its static length `estimate`.

  `estimate(options, L)` is the decoder length rows of L pieces need;
  `options["target_length"]`, when set, overrides it.
  """
  def wrap(fn):
    fn.budget = estimate
    return fn
  return wrap


def full_length(options, length):
  """The whole row: targets as long as the input."""
  del options
  return length


def target_length(targets, options, length):
  """Static T of `targets` for rows of `length` pieces."""
  if options.get("target_length"):
    return int(options["target_length"])
  want = getattr(targets, "budget", full_length)(options, length)
  return min(length, int(math.ceil(want)))


class Denoiser(common.Scheme):
  """Noise -> (encoder inputs, decoder targets) -> decoder cross-entropy.

  Subclasses (made by `denoiser`) set `noise`, `inputs` and `targets`.
  """
  interfaces = ("encdec",)
  noise = None
  inputs = None
  targets = None
  scoring = None  # how `zoo.scoring` reads the model; None: family default

  def corrupt(self, batch, rng):
    """The batch with `mask` [B, L] and the `enc` and `dec` streams."""
    k_noise, k_inputs = jax.random.split(rng)
    o, sp = self.options, self.specials
    length = batch["tokens"].shape[1]
    mask = self.noise(k_noise, batch, sp, o)
    enc = self.inputs(k_inputs, batch, mask, sp, o, length)
    dec = self.targets(batch, mask, sp, o,
                       target_length(self.targets, o, length))
    return dict(batch, mask=mask, enc=enc, dec=dec)

  def model_inputs(self, inputs):
    args, kw = encdec_inputs(self.config, inputs["enc"], inputs["dec"])
    if self.fuses_head:
      kw["return_logits"] = False
    return args, kw

  def score(self, params, inputs, outputs, rng, deterministic):
    dec = inputs["dec"]
    return {"lm": self.head_sums(params, outputs, dec["tokens"],
                                 dec["segment_ids"] > 0)}


def denoiser(name, noise, inputs, targets, doc="", scoring=None,
             **defaults):
  """Registers scheme `name`: `noise`, `inputs`, `targets` and the option
  defaults (`target_length` 0, the budget, and `head_chunk` 0, the whole
  decoder logits, as `clm`'s, are added); `scoring` names how
  `zoo.scoring` reads a sentence in this scheme's format (None: the
  family's default). Returns its class."""
  cls = type(name, (Denoiser,), {
      "name": name, "__doc__": doc or f"The {name} denoising scheme.",
      "scoring": scoring,
      # The defining module, as `collections.namedtuple` finds it.
      "__module__": sys._getframe(1).f_globals.get("__name__", __name__),  # pylint: disable=protected-access
      "noise": staticmethod(noise), "inputs": staticmethod(inputs),
      "targets": staticmethod(targets),
      "defaults": dict(defaults, target_length=0, head_chunk=0)})
  return register(cls)
