"""SpanBERT: `span_mlm`, masked spans of whole words and the span boundary
objective (SBO).

Span lengths (in words) follow Geometric(p=0.2) truncated at 10, spans are
placed over whole words until 15% of the words are covered, and each span
is replaced as a unit: all [MASK] 80%, all random 10%, all kept 10%. The
SBO head predicts every masked piece from the encoder states just outside
its span and its position inside the span.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from objectives import common
from objectives import noise
from objectives import register
from objectives import transforms
from zoo.models import layers


class SpanBoundaryHead(nn.Module):
  """Two-layer GELU/LayerNorm MLP over [left; right; position] -> logits.

  The logits are either tied to the encoder's token table (SpanBERT's
  release: `table` given, plus a bias) or an own output layer.

  Attributes:
    vocab_size: V.
    features: D of the encoder.
    max_positions: rows of the in-span position table.
  """
  vocab_size: int
  features: int
  max_positions: int = 32

  @nn.compact
  def __call__(self, left, right, rel, table=None):
    """left, right [B, T, D] float32, rel [B, T] int32, table [V, E] or
    None -> logits [B, T, V]."""
    pos = layers.Embed(self.max_positions, self.features,
                       axes=("positions", "embed"), name="position")(rel)
    h = jnp.concatenate([left, right, pos], axis=-1)
    for i in range(2):
      width = table.shape[1] if i and table is not None else self.features
      axes = ("mlp", "embed") if i else ("embed", "mlp")
      h = layers.Dense(width, axes, name=f"dense_{i}")(h)
      h = layers.LayerNorm(1e-12, name=f"norm_{i}")(jax.nn.gelu(h))
    if table is None:
      return layers.Dense(self.vocab_size, ("embed", "vocab"),
                          name="logits")(h)
    bias = layers.param_with_axes(self, "bias", nn.initializers.zeros,
                                  (self.vocab_size,), ("vocab",))
    return jnp.einsum("btd,vd->btv", h, table) + bias


def token_table(model_params):
  """The encoder's input token table [V, E] (`embeddings/token`)."""
  try:
    return model_params["embeddings"]["token"]["embedding"]
  except (KeyError, TypeError):
    raise ValueError("a tied span-boundary head needs the encoder's "
                     "embeddings/token table, which this family lacks; set "
                     "sbo_tied=False") from None


def span_boundaries(mask):
  """Nearest unmasked positions around each masked one.

  Args:
    mask: [B, T] bool masked positions.

  Returns:
    ([B, T] int32 left boundary, [B, T] int32 right boundary, [B, T] int32
    1-based offset of each position from its left boundary).
  """
  t = jnp.broadcast_to(jnp.arange(mask.shape[-1]), mask.shape)
  left = jax.lax.cummax(jnp.where(mask, -1, t), axis=1)
  right = jax.lax.cummin(jnp.where(mask, mask.shape[-1], t), axis=1,
                         reverse=True)
  last = mask.shape[-1] - 1
  return jnp.clip(left, 0, last), jnp.clip(right, 0, last), t - left


@register
class SpanMLM(common.Scheme):
  """Span masking over whole words, plus the span boundary objective."""
  name = "span_mlm"
  interfaces = ("encoder",)
  defaults = {
      "rate": 0.15,        # fraction of words covered by spans
      "p": 0.2,            # geometric span-length parameter
      "max_length": 10,    # longest span, in words
      "mask_rate": 0.8,    # spans replaced by [MASK]
      "random_rate": 0.1,  # spans replaced by random pieces
      "sbo": True,         # add the span boundary objective
      "sbo_weight": 1.0,   # its weight in the loss
      # The SBO's output layer: tied to the token table, as in SpanBERT's
      # release (the paper does not say); False gives it its own weights.
      "sbo_tied": True,
      "max_positions": 32,  # in-span positions the SBO head knows
  }
  model_overrides = {"nsp_head": False}

  def setup(self):
    self.part_weights = {"mlm": 1.0, "sbo": self.options["sbo_weight"]}
    self.head = SpanBoundaryHead(self.specials.vocab_size, self._width(),
                                 self.options["max_positions"])

  def _width(self):
    return getattr(self.config, "embed_dim", None) or self.config.hidden_dim

  def corrupt(self, batch, rng):
    o = self.options
    k_mask, k_swap = jax.random.split(rng)
    ok = noise.eligible(batch["tokens"], self.specials)
    starts = noise.unit_starts(batch["word_ids"], ok)
    mask = noise.geometric_span_mask(k_mask, starts, ok, o["rate"], o["p"],
                                     o["max_length"])
    span_start = mask & ~noise.shift_in(mask, False)
    groups = jnp.clip(jnp.cumsum(span_start, axis=-1), 0,
                      mask.shape[-1] - 1)
    tokens = noise.replace_tokens(k_swap, batch["tokens"], mask,
                                  self.specials, o["mask_rate"],
                                  o["random_rate"], groups=groups)
    return dict(batch, inputs=tokens, mask=mask)

  def model_inputs(self, inputs):
    doc = inputs["doc_ids"]
    return (inputs["inputs"],), {
        "segment_ids": doc,
        "positions": transforms.positions_from_segments(doc)}

  def _table(self, model_params):
    if not self.options["sbo_tied"]:
      return None
    return nn.meta.unbox(token_table(model_params))

  def _sbo_logits(self, params, hidden, mask):
    left, right, rel = span_boundaries(mask)
    gather = lambda idx: jnp.take_along_axis(hidden, idx[..., None], axis=1)
    rel = jnp.clip(rel, 0, self.options["max_positions"] - 1)
    return self.head.apply({"params": params["sbo"]}, gather(left),
                           gather(right), rel, self._table(params["model"]))

  def init_heads(self, rng, params, inputs):
    if not self.options["sbo"]:
      return {}
    args, kw = self.model_inputs(inputs)
    hidden = self.model.apply({"params": params["model"]}, *args,
                              return_logits=False, **kw)["hidden"]
    left, right, rel = span_boundaries(inputs["mask"])
    del left, right
    return {"sbo": self.head.init(rng, hidden, hidden, jnp.minimum(rel, 0),
                                  self._table(params["model"]))["params"]}

  def score(self, params, inputs, outputs, rng, deterministic):
    parts = {"mlm": common.token_sums(outputs["logits"], inputs["tokens"],
                                      inputs["mask"])}
    if self.options["sbo"]:
      logits = self._sbo_logits(params, outputs["hidden"], inputs["mask"])
      parts["sbo"] = common.token_sums(logits, inputs["tokens"],
                                       inputs["mask"])
    return parts
