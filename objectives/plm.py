"""XLNet's permutation language modelling: `plm`.

Yang et al. 2019. Each step draws span targets, about 1/K of each
document's pieces, and a factorisation order with the targets last
(`objectives.permutation`); the model reads the true row in its content
stream and predicts each target from its query stream, which knows the
target's position and the pieces that precede it in the order. The loss
is the cross-entropy of the query-stream logits [B, K, V] at the K static
prediction slots (unused slots weigh 0). Only the xlnet family has a query
stream, so only it binds.
"""

from objectives import common
from objectives import permutation
from objectives import register
from objectives import transforms

PLM_DEFAULTS = {
    "ratio": 6,         # K: one predicted piece per K (the paper's K = 6)
    "max_span": 5,      # longest target span L
    "order": "paper",   # "paper" | "release", see objectives.permutation
}
FAMILIES = ("xlnet",)  # families with a two-stream (query) attention


@register
class PermutationLM(common.Scheme):
  """XLNet's permutation LM with span-based partial prediction."""
  name = "plm"
  interfaces = ("encoder",)
  defaults = PLM_DEFAULTS

  def setup(self):
    if self.family not in FAMILIES:
      raise ValueError(
          f"objective 'plm' needs a two-stream model (query stream with "
          f"perm_mask and target_mapping), one of {FAMILIES}; "
          f"{self.family!r} has none")
    ratio, span = self.options["ratio"], self.options["max_span"]
    if int(ratio) != ratio or ratio < 2 or int(span) != span or span < 1:
      raise ValueError(f"plm needs an integer ratio >= 2 and max_span >= 1; "
                       f"got ratio={ratio}, max_span={span}")
    if self.options["order"] not in permutation.ORDERS:
      raise ValueError(f"unknown factorisation order "
                       f"{self.options['order']!r}; orders: "
                       f"{permutation.ORDERS}")

  def corrupt(self, batch, rng):
    o = self.options
    noised = permutation.permute(rng, batch, self.specials, int(o["ratio"]),
                                 int(o["max_span"]), o["order"])
    return dict(batch, **noised)

  def model_inputs(self, inputs):
    doc = inputs["doc_ids"]
    return (inputs["tokens"],), {
        "segment_ids": doc,
        "positions": transforms.positions_from_segments(doc),
        "perm_mask": inputs["perm_mask"],
        "target_mapping": inputs["target_mapping"]}

  def score(self, params, inputs, outputs, rng, deterministic):
    return {"plm": common.token_sums(outputs["logits"], inputs["targets"],
                                     inputs["weights"])}

