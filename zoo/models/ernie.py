"""ERNIE (Zhang et al. 2019, Tsinghua): BERT with knowledge-base entities
fused into its upper layers.

The T-encoder is N BERT blocks over the tokens (`num_layers`). The
K-encoder is M aggregators (`num_k_layers`), each reading two streams:
the token states w [B,T,D] and the entity states e [B,T,E], where an
entity sits at its mention's first token (`has_entity`) and other
positions hold zeros. An aggregator (the paper's equations 3-6, with the
residual connections and layer norms of its release):

  w~ = LN(w + MH-ATT(w)),  e~ = LN(e + MH-ATT_e(e))   (entities attend to
                                                        the row's entities)
  h  = GELU(W_t w~ + W_e e~ + b)     at tokens with an entity,
       GELU(W_t w~ + b)              elsewhere                     [B,T,F]
  w' = LN(w~ + W_t' h + b_t),  e' = LN(e~ + W_e' h + b_e) (entity tokens)

The entity stream starts from fixed vectors of width E given by the
caller (TransE's, `zoo.knowledge.entity_table`), as in the paper; the
model keeps no entity table. Without entities (plain text, fine-tuning
on a task's text) every aggregator runs its token path alone. The MLM head
is BERT's, tied to the token table.

Letters: B batch, T length, D embed, E entity width, F mlp, V vocab.
"""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from zoo.models import bert
from zoo.models import blocks
from zoo.models import layers
from zoo.models import masks

Array = jax.Array
INTERFACE = "encoder"


@dataclasses.dataclass(frozen=True)
class Config(bert.Config):
  """BERT's fields (`num_layers` = N of the T-encoder) and the K-encoder's."""
  num_k_layers: int = 6  # M aggregators
  entity_dim: int = 100  # E: the entity vectors (TransE's) and their stream
  entity_heads: int = 4  # heads of the entities' self-attention
  nsp_head: bool = False  # the knowledgeable schemes train MLM and dEA


SIZES = {
    "tiny": dict(vocab_size=512, num_layers=1, num_k_layers=1, embed_dim=64,
                 num_heads=4, mlp_dim=128, max_len=128, entity_dim=16,
                 entity_heads=2),
    # The paper's: 6 + 6 layers of BERT-base widths, 100-d entities.
    "base": dict(num_layers=6, num_k_layers=6),
}


def entity_mask(has_entity: Array, segments: Array) -> Array:
  """[B,T,T] bool: query i may read key j when both hold an entity of
  one segment, and every position reads itself (no empty rows)."""
  same = segments[:, :, None] == segments[:, None, :]
  both = has_entity[:, :, None] & has_entity[:, None, :]
  eye = jnp.eye(has_entity.shape[1], dtype=bool)[None]
  return (both & same & (segments[:, :, None] > 0)) | eye


class Aggregator(nn.Module):
  """One K-encoder layer: both streams attend, then fuse (see the module
  docstring)."""
  config: Config

  def _attend(self, x, heads, mask, name, deterministic):
    c = self.config
    att = layers.MultiHeadAttention(
        heads, x.shape[-1] // heads, dtype=c.dtype,
        dropout_rate=c.attention_dropout_rate, impl="xla", name=name)
    h = att(x, mask=mask, deterministic=deterministic)
    h = layers.Dropout(c.dropout_rate)(h, deterministic=deterministic)
    return layers.LayerNorm(c.norm_eps, name=f"{name}_norm")(x + h)

  def _out(self, h, x, axis, name, deterministic):
    c = self.config
    y = layers.Dense(x.shape[-1], ("mlp", axis), dtype=c.dtype, name=name)(h)
    y = layers.Dropout(c.dropout_rate)(y, deterministic=deterministic)
    return layers.LayerNorm(c.norm_eps, name=f"{name}_norm")(x + y)

  @nn.compact
  def __call__(self, w: Array, e: Array, has: Array, mask, ent_mask: Array,
               deterministic: bool = True) -> tuple[Array, Array]:
    """w [B,T,D], e [B,T,E], has [B,T] bool -> (w' [B,T,D], e' [B,T,E])."""
    c = self.config
    w = self._attend(w, c.num_heads, mask, "attention", deterministic)
    e = self._attend(e, c.entity_heads, ent_mask, "entity_attention",
                     deterministic)
    h = layers.Dense(c.mlp_dim, ("embed", "mlp"), dtype=c.dtype,
                     name="fuse_tokens")(w)
    from_e = layers.Dense(c.mlp_dim, ("entity", "mlp"), use_bias=False,
                          dtype=c.dtype, name="fuse_entities")(e)
    h = layers.activation_fn(c.activation)(
        h + jnp.where(has[..., None], from_e, 0.0))
    w = self._out(h, w, "embed", "token_out", deterministic)
    e = jnp.where(has[..., None], self._out(h, e, "entity", "entity_out",
                                            deterministic), 0.0)
    return w, e


class Model(nn.Module):
  """ERNIE's encoder with BERT's embeddings, pooler and MLM head."""
  config: Config

  def setup(self):
    c = self.config
    if c.entity_dim % c.entity_heads:
      raise ValueError(f"entity_dim {c.entity_dim} is not divisible by "
                       f"entity_heads {c.entity_heads}")
    self.embeddings = bert.Embeddings(
        c.vocab_size, c.embed_dim, c.max_len, c.type_vocab_size, c.norm_eps,
        c.dropout_rate, c.dtype, c.position_init)
    self.encoder = blocks.Stack(c.block(), c.num_layers, scan=c.scan_layers,
                                remat=c.remat)
    self.aggregators = [Aggregator(c, name=f"aggregator_{i}")
                        for i in range(c.num_k_layers)]
    if c.pooler:
      self.pooler = layers.Dense(c.embed_dim, ("embed", "embed_out"),
                                 dtype=c.dtype)
    self.mlm = bert.MlmHead(c.embed_dim, c.activation, c.norm_eps, c.dtype)

  def __call__(self, tokens: Array, *, entities: Array | None = None,
               has_entity: Array | None = None,
               segment_ids: Array | None = None,
               token_types: Array | None = None,
               positions: Array | None = None, deterministic: bool = True,
               return_logits: bool = True,
               logits_at: Array | None = None, **unused) -> dict[str, Array]:
    """Encodes tokens with their linked entities.

    Args:
      tokens: [B,T] int32.
      entities: [B,T,E] float: each linked entity's fixed vector at its
        mention's first token, zeros elsewhere; None = no entities.
      has_entity: [B,T] bool, True where `entities` holds one; None =
        (entities != 0) along E, or nowhere without entities.
      segment_ids, token_types, positions, deterministic, return_logits,
        logits_at: as `bert.Model`.
      **unused: keywords of the other families, ignored.

    Returns:
      "hidden" [B,T,D], "layers" (embeddings, the N blocks', the M
      aggregators' token states), "entity_hidden" [B,T,E], "logits" [B,T,V]
      or [B,K,V], "pooled" [B,D] (if the config has a pooler).
    """
    del unused
    c = self.config
    segments = masks.real_segments(tokens, c.pad_id, segment_ids)
    mask = bert.encoder_mask(tokens, c.pad_id, segment_ids, None)
    pos = layers.arange_positions(tokens, positions) + c.position_offset
    x = self.embeddings(tokens, pos, token_types, deterministic)
    w, hs = self.encoder(x, mask, None, deterministic=deterministic)
    if entities is None:
      entities = jnp.zeros(tokens.shape + (c.entity_dim,), jnp.float32)
      has_entity = jnp.zeros(tokens.shape, bool)
    elif entities.shape[-1] != c.entity_dim:
      raise ValueError(f"entity vectors of width {entities.shape[-1]}; this "
                       f"ERNIE reads entity_dim {c.entity_dim}")
    elif has_entity is None:
      has_entity = jnp.any(entities != 0, axis=-1)
    e = jnp.where(has_entity[..., None], entities.astype(jnp.float32), 0.0)
    ent_mask = entity_mask(has_entity, segments)
    outs = list(hs)
    for agg in self.aggregators:
      w, e = agg(w, e, has_entity, mask, ent_mask, deterministic)
      outs.append(w)
    out = {"hidden": w, "layers": (x,) + tuple(outs), "entity_hidden": e}
    if return_logits:
      out["logits"] = self.mlm(bert.gather_positions(w, logits_at),
                               self.embeddings)
    if c.pooler:
      out["pooled"] = jnp.tanh(self.pooler(w[:, 0]))
    return out
