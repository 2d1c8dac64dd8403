"""CoVe's pre-training: attentional translation of each packed pair.

McCann et al. 2017 train the MT-LSTM as the encoder of an attentional
translation model and keep the encoder. The parallel sample
(`data/parallel.py`) writes each sentence pair as a document of two lines,
source then target, so a pair arrives in the rows like any document: its
first sentence is the source and the rest of the document the target
(`pairs`). The encoder reads the source, restarting at each; the decoder
reads the target moved right by one piece and attends to its own pair's
source only; the loss is the cross-entropy of the target's pieces.
"""

import jax
import jax.numpy as jnp

from objectives import common
from objectives import register
from objectives import segments


def pairs(batch):
  """Source and target of each packed pair.

  Args:
    batch: the contract's arrays (`tokens`, `doc_ids`, `sentence_ids`
      [B,T] int32).

  Returns:
    (source [B,T] bool: the first sentence of each document, target [B,T]
    bool: the rest of it, unit [B,T] int32: 2d - 1 on document d's
    source, 2d on its target, 0 on padding).
  """
  sent = segments.sentence_index(batch)
  doc = batch["doc_ids"]
  t = sent.shape[1]
  big = jnp.iinfo(jnp.int32).max
  first = jax.vmap(lambda s, d: jax.ops.segment_min(
      jnp.where(s > 0, s, big), d, num_segments=t + 1))(sent, doc)
  opening = jnp.take_along_axis(first, doc, axis=1)
  source = (sent > 0) & (sent == opening)
  target = (sent > 0) & ~source
  unit = jnp.where(source, 2 * doc - 1, jnp.where(target, 2 * doc, 0))
  return source, target, unit


@register
class CoveMT(common.Scheme):
  """Translate each pair's source into its target; keep the encoder."""
  name = "cove_mt"
  interfaces = ("encoder",)

  def setup(self):
    if self.family != "cove":
      raise ValueError(f"objective 'cove_mt' needs the cove family (its "
                       f"attentional decoder); got {self.family!r}")

  def corrupt(self, batch, rng):
    source, target, unit = pairs(batch)
    doc = batch["doc_ids"]
    attend = (target[:, :, None] & source[:, None, :]
              & (doc[:, :, None] == doc[:, None, :]))
    inputs = common.shift_right(batch["tokens"], jnp.where(target, unit, 0),
                                self.config.pad_id)
    return dict(batch, source=source, target=target, unit=unit,
                attend=attend, decoder_inputs=inputs)

  def model_inputs(self, inputs):
    return (inputs["tokens"],), {"segment_ids": inputs["unit"],
                                 "decoder_inputs": inputs["decoder_inputs"],
                                 "attend": inputs["attend"]}

  def score(self, params, inputs, outputs, rng, deterministic):
    return {"translation": common.token_sums(
        outputs["logits"], inputs["tokens"], inputs["target"])}
