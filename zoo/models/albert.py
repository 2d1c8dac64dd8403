"""ALBERT: factorised embeddings and one block shared by every layer.

Lan et al. 2020. Tokens embed into E << D dimensions, a dense maps E -> D,
and one post-LN block's params are applied L times. The pooler feeds a
2-way sentence-order (SOP) head; the MLM head maps D -> E and reuses the
E-wide token table.

Shapes use the letters of `zoo.models.layers` (B, T, D, V, L), E the
embedding width.
"""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from zoo.models import bert
from zoo.models import blocks
from zoo.models import layers
from zoo.models import masks
from zoo.models import positions as positions_lib

Array = jax.Array
INTERFACE = "encoder"


@dataclasses.dataclass(frozen=True)
class Config(bert.Config):
  """BERT's fields (see `bert.Config`) plus ALBERT's."""
  vocab_size: int = 30000  # V
  embedding_dim: int = 128  # E: token-table width
  activation: str = "gelu_tanh"  # MLP and MLM-transform activation
  dropout_rate: float = 0.0  # ALBERT trains without dropout
  attention_dropout_rate: float = 0.0  # likewise


SIZES = {
    "tiny": dict(vocab_size=512, num_layers=2, embed_dim=64, num_heads=4,
                 mlp_dim=128, max_len=128, embedding_dim=32),
    "base": dict(),  # 12 x 768, E = 128, 12M params
    "large": dict(num_layers=24, embed_dim=1024, num_heads=16, mlp_dim=4096),
}


class Model(nn.Module):
  """ALBERT encoder with pooler, SOP and MLM heads.

  Attributes:
    config: a `Config` (`nsp_head` is the SOP head; `scan_layers` does not
      apply, the one shared block is looped).
  """
  config: Config

  def setup(self):
    c = self.config
    self.embeddings = bert.Embeddings(
        c.vocab_size, c.embedding_dim, c.max_len, c.type_vocab_size,
        c.norm_eps, c.dropout_rate, c.dtype, c.position_init,
        c.trigram_input)
    self.embed_proj = layers.Dense(c.embed_dim, ("embed", "embed_out"),
                                   dtype=c.dtype)
    self.encoder = blocks.Stack(c.block(), c.num_layers, remat=c.remat,
                                shared=True)
    if c.pooler:
      self.pooler = layers.Dense(c.embed_dim, ("embed", "embed_out"),
                                 dtype=c.dtype)
    if c.pooler and c.nsp_head:
      self.sop = layers.Dense(2, ("embed", "classes"), dtype=c.dtype)
    self.mlm = bert.MlmHead(c.embedding_dim, c.activation, c.norm_eps,
                            c.dtype)

  def __call__(self, tokens: Array, *, segment_ids: Array | None = None,
               token_types: Array | None = None,
               positions: Array | None = None, mask: Array | None = None,
               deterministic: bool = True, return_logits: bool = True,
               logits_at: Array | None = None) -> dict[str, Array]:
    """Encodes tokens; arguments as `bert.Model.__call__`.

    Returns:
      "hidden" [B, T, D], "layers" L+1 x [B, T, D] (projected embeddings
      first), "logits" [B, T, V] ([B, K, V] at `logits_at`), "pooled"
      [B, D], "sop_logits" [B, 2].
    """
    c = self.config
    attn_mask = bert.encoder_mask(tokens, c.pad_id, segment_ids, mask)
    pos = layers.arange_positions(tokens, positions) + c.position_offset
    x = self.embed_proj(self.embeddings(
        tokens, pos, token_types, deterministic,
        masks.real_segments(tokens, c.pad_id, segment_ids)))
    bias = (positions_lib.alibi_bias(pos, c.num_heads) if c.alibi else None)
    h, hs = self.encoder(x, attn_mask, bias, deterministic=deterministic)
    out = {"hidden": h, "layers": (x,) + hs}
    if return_logits:
      out["logits"] = self.mlm(bert.gather_positions(h, logits_at),
                               self.embeddings)
    if c.pooler:
      out["pooled"] = jnp.tanh(self.pooler(h[:, 0]))
      if c.nsp_head:
        out["sop_logits"] = self.sop(out["pooled"])
    return out
