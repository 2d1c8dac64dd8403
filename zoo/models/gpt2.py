"""GPT-2: a pre-LN causal transformer decoder with a tied LM head.

Radford et al. 2019. Token + learned position embeddings, L pre-LN blocks
(tanh-approximated gelu), a final LayerNorm, logits from the token table
transposed. Attention is causal AND within a document (`segment_ids`) AND
the optional extra `mask`.

Shapes use the letters of `zoo.models.layers` (B, T, D, V, L).
"""

import dataclasses

import flax.linen as nn
import jax

from zoo.models import bert
from zoo.models import blocks
from zoo.models import layers
from zoo.models import masks

Array = jax.Array
INTERFACE = "decoder"
# `__call__` takes an extra attention `mask` and `positions`
# (`models.takes_attention_mask`).
ATTENTION_MASK = True


@dataclasses.dataclass(frozen=True)
class Config:
  """GPT-2 hyper-parameters."""
  vocab_size: int = 50257  # V
  pad_id: int = 0  # padding id; -1 = none (every token is real)
  dtype: str = "float32"  # compute dtype of matmuls; params stay float32
  dropout_rate: float = 0.1  # on embeddings and every sub-layer output
  attention_dropout_rate: float = 0.1  # on attention probabilities
  scan_layers: bool = False  # one nn.scan over the layers
  remat: str = "none"  # backward recomputation: blocks.REMAT (or a bool)
  adapter_dim: int = 0  # >0: bottleneck adapters in every block
  num_layers: int = 12  # L
  embed_dim: int = 768  # D
  num_heads: int = 12  # N
  mlp_dim: int = 3072  # F
  max_len: int = 1024  # rows of the position table
  position_init: str = "normal"  # "normal" or "sinusoidal" (layers.position_init)
  activation: str = "gelu_tanh"  # MLP activation
  norm_eps: float = 1e-5  # LayerNorm epsilon
  attention_impl: str = "auto"  # see layers.attention

  def block(self) -> blocks.BlockConfig:
    """The BlockConfig of every layer."""
    if self.embed_dim % self.num_heads:
      raise ValueError(f"embed_dim {self.embed_dim} is not divisible by "
                       f"num_heads {self.num_heads}")
    return blocks.BlockConfig(
        num_heads=self.num_heads, head_dim=self.embed_dim // self.num_heads,
        mlp_dim=self.mlp_dim, activation=self.activation, pre_norm=True,
        norm_eps=self.norm_eps, dropout_rate=self.dropout_rate,
        attention_dropout_rate=self.attention_dropout_rate,
        adapter_dim=self.adapter_dim, dtype=self.dtype,
        attention_impl=self.attention_impl)


SIZES = {
    "tiny": dict(vocab_size=512, num_layers=2, embed_dim=64, num_heads=4,
                 mlp_dim=256, max_len=128),
    "small": dict(),  # 124M
    "base": dict(num_layers=24, embed_dim=1024, num_heads=16,
                 mlp_dim=4096),  # "medium", 355M
    "large": dict(num_layers=36, embed_dim=1280, num_heads=20,
                  mlp_dim=5120),  # 774M
}


class Model(nn.Module):
  """GPT-2 decoder.

  Attributes:
    config: a `Config`.
  """
  config: Config

  def setup(self):
    c = self.config
    self.token = layers.Embed(c.vocab_size, c.embed_dim, dtype=c.dtype)
    self.position = layers.Embed(
        c.max_len, c.embed_dim, axes=("positions", "embed"),
        embedding_init=layers.position_init(c.position_init))
    self.dropout = layers.Dropout(c.dropout_rate)
    self.decoder = blocks.Stack(c.block(), c.num_layers, scan=c.scan_layers,
                                remat=c.remat)
    self.final_norm = layers.LayerNorm(c.norm_eps)

  def __call__(self, tokens: Array, *, segment_ids: Array | None = None,
               positions: Array | None = None, mask: Array | None = None,
               prefix: Array | None = None,
               deterministic: bool = True, return_logits: bool = True,
               logits_at: Array | None = None) -> dict[str, Array]:
    """Runs the decoder.

    Args:
      tokens: [B, T] int32.
      segment_ids: [B, T] int32, 0 = padding; attention stays within equal
        ids. None = (tokens != pad_id).
      positions: [B, T] int32; None = arange(T).
      mask: [B, T, T] bool, AND-ed with the causal and segment masks.
      prefix: [B, T] bool, each document's prefix: attention within it is
        bidirectional (a prefix LM, `masks.prefix_lm_mask`) and causal
        after it. None = causal everywhere.
      deterministic: no dropout when True.
      return_logits: compute the LM logits.
      logits_at: [B, K] int32 positions: logits there only ([B, K, V]),
        e.g. the target positions of a prompted row.

    Returns:
      "hidden" [B, T, D] (after the final LayerNorm), "layers" L+1 x
      [B, T, D] (embeddings, then each block's output before the final
      norm), "logits" [B, T, V] or [B, K, V] (if return_logits); all
      float32.
    """
    c = self.config
    segments = masks.real_segments(tokens, c.pad_id, segment_ids)
    if prefix is None:
      attn_mask = masks.self_attention(segments, causal=True, extra=mask)
    else:
      attn_mask = masks.self_attention(segments, extra=layers.combine_masks(
          mask, layers.prefix_lm_mask(prefix)))
    pos = layers.arange_positions(tokens, positions)
    x = self.dropout(self.token(tokens) + self.position(pos),
                     deterministic=deterministic)
    h, hs = self.decoder(x, attn_mask, deterministic=deterministic)
    h = self.final_norm(h)
    out = {"hidden": h, "layers": (x,) + hs}
    if return_logits:
      out["logits"] = self.lm_logits(bert.gather_positions(h, logits_at))
    return out

  def lm_logits(self, h: Array) -> Array:
    """h [B, T, D] (after the final LayerNorm) -> [B, T, V] float32 through
    the tied head."""
    return self.token.attend(h)

