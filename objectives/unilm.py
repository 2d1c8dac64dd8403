"""UniLM: one network, four attention masks, one cloze task.

Each row draws a mode (`zoo.models.masks.unilm_mask`): bidirectional
(every piece sees its document), left-to-right (causal), right-to-left
(each piece sees itself and what follows) or seq2seq (each document split
at a random point: the source sees itself, the target sees the source and
its own past). Pieces are masked as in BERT in every mode and predicted
from the masked input. The paper's mixture (Dong et al. 2019, section
2.3) is the default: bidirectional 1/3, seq2seq 1/3, left-to-right 1/6,
right-to-left 1/6.
"""

import jax
import jax.numpy as jnp

from objectives import common
from objectives import mlm as mlm_lib
from objectives import register
from objectives import segments
from objectives import transforms
from zoo.models import masks


@register
class UniLM(common.Scheme):
  """MLM under a per-row bidirectional, left-to-right, right-to-left or
  seq2seq mask."""
  name = "unilm"
  interfaces = ("encoder",)
  # Weights of the modes in `masks` order: bidirectional, left-to-right,
  # right-to-left, seq2seq.
  defaults = dict(mlm_lib.MLM_DEFAULTS,
                  mode_probs=(1 / 3, 1 / 6, 1 / 6, 1 / 3))
  model_overrides = {"nsp_head": False}

  def setup(self):
    probs = tuple(self.options["mode_probs"])
    if len(probs) != 4 or min(probs) < 0 or sum(probs) <= 0:
      raise ValueError("mode_probs must be 4 non-negative weights "
                       "(bidirectional, left-to-right, right-to-left, "
                       f"seq2seq); got {probs}")
    self.log_probs = tuple(float(jnp.log(p / sum(probs) + 1e-30))
                           for p in probs)

  def corrupt(self, batch, rng):
    k_mode, k_split, k_mask = jax.random.split(rng, 3)
    b = batch["tokens"].shape[0]
    modes = jax.random.categorical(k_mode, jnp.array(self.log_probs),
                                   shape=(b,))
    prefix = segments.prefix_split(k_split, batch, self.specials)
    opts = {k: v for k, v in self.options.items() if k != "mode_probs"}
    tokens, mask = mlm_lib.mask_tokens(k_mask, batch, self.specials, **opts)
    inputs = dict(batch, inputs=tokens, mask=mask, modes=modes, prefix=prefix)
    return mlm_lib.gather_predictions(inputs, opts["rate"])

  def model_inputs(self, inputs):
    doc = inputs["doc_ids"]
    return (inputs["inputs"],), {
        "segment_ids": doc,
        "positions": transforms.positions_from_segments(doc),
        "mask": masks.unilm_mask(inputs["modes"], inputs["prefix"]),
        "logits_at": inputs["logits_at"]}

  def score(self, params, inputs, outputs, rng, deterministic):
    return {"mlm": mlm_lib.masked_sums(outputs["logits"], inputs)}
