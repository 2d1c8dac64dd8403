"""Skip-Thought: generate each sentence's neighbours from its vector.

Kiros et al. 2015: a GRU encodes sentence s; one GRU decoder generates
sentence s + 1 from that vector, another sentence s - 1. The zoo computes
it from the other side, for every sentence of a packed row at once: the
pieces of sentence s are predicted by the "next" decoder from the vector
of sentence s - 1 and by the "previous" decoder from the vector of
sentence s + 1 (`zoo.models.skip_thought.neighbour_vectors`), counted only
where that neighbour is in the row and in the same document. The loss is
the mean of the two decoders' cross-entropies per piece (the paper sums
the two sentences' log-likelihoods). Sentences come from the rows'
`sentence_ids` (`segments.sentence_index`), inside jit.
"""

import jax.numpy as jnp

from objectives import common
from objectives import quick_thought
from objectives import register
from objectives import segments
from zoo.models import skip_thought as model_lib


def neighbour_in_document(doc_ids, sent, offset: int):
  """[B,T] bool: sentence s + offset holds pieces of this position's
  document (doc_ids, sent [B,T] int32; sentences numbered 1, 2, ...)."""
  t = sent.shape[1]
  # Column s - 1 holds sentence s's document; one more column stays empty.
  docs = quick_thought.sentence_docs(doc_ids, sent, t + 1)
  want = jnp.where(sent > 0, sent + offset, 0).clip(0, t + 1)
  theirs = jnp.take_along_axis(docs, (want - 1).clip(0), axis=1)
  return (sent > 0) & (want > 0) & (theirs == doc_ids)


@register
class SkipThought(common.Scheme):
  """Both neighbours of every sentence, generated from its vector."""
  name = "skip_thought"
  interfaces = ("encoder",)
  part_weights = {"neighbours": 1.0, "next": 0.0, "previous": 0.0}

  def setup(self):
    if self.family != "skip_thought":
      raise ValueError(f"objective 'skip_thought' needs the skip_thought "
                       f"family (its two decoders); got {self.family!r}")

  def corrupt(self, batch, rng):
    return dict(batch, sent=segments.sentence_index(batch))

  def model_inputs(self, inputs):
    sent = inputs["sent"]
    start = self.config.pad_id  # the decoders' start id
    return (inputs["tokens"],), {
        "segment_ids": sent,
        "decoder_inputs": common.shift_right(inputs["tokens"], sent, start)}

  def score(self, params, inputs, outputs, rng, deterministic):
    parts = {}
    for name in model_lib.DECODERS:
      weights = outputs[f"has_{name}"] & neighbour_in_document(
          inputs["doc_ids"], inputs["sent"], model_lib.OFFSETS[name])
      parts[name] = common.token_sums(outputs[f"logits_{name}"],
                                      inputs["tokens"], weights)
    both = {k: parts["next"][k] + parts["previous"][k] for k in parts["next"]}
    return {"neighbours": both, **parts}
