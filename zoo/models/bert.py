"""BERT and RoBERTa: a post-LN transformer encoder with a tied MLM head.

Devlin et al. 2019; Liu et al. 2019. Token + position + token-type
embeddings, LayerNorm, L post-LN blocks; a pooler (tanh dense on the first
token) and a next-sentence (or sentence-order) head on it; an MLM head
(dense, activation, LayerNorm, then the token table transposed plus a bias).

RoBERTa is the same network with its own defaults (`FAMILY_DEFAULTS`): one
token type, no NSP head, LayerNorm eps 1e-5, and position ids offset by
`position_offset` (its convention numbers positions from pad_id + 1).

Shapes use the letters of `zoo.models.layers` (B, T, D, V, L).
"""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from zoo.models import blocks
from zoo.models import layers
from zoo.models import masks
from zoo.models import positions as positions_lib

Array = jax.Array
INTERFACE = "encoder"


@dataclasses.dataclass(frozen=True)
class Config:
  """BERT hyper-parameters (field names shared by the BERT-like families)."""
  vocab_size: int = 30522  # V
  pad_id: int = 0  # padding token id
  dtype: str = "float32"  # compute dtype of matmuls; params stay float32
  dropout_rate: float = 0.1  # on embeddings and every sub-layer output
  attention_dropout_rate: float = 0.1  # on attention probabilities
  scan_layers: bool = False  # one nn.scan over the layers
  remat: str = "none"  # backward recomputation: blocks.REMAT (or a bool)
  adapter_dim: int = 0  # >0: bottleneck adapters in every block
  pal_dim: int = 0  # d_s > 0: projected attention layers (BERT and PALs)
  pal_heads: int = 0  # attention heads of each PAL; 0: num_heads
  num_layers: int = 12  # L
  embed_dim: int = 768  # D
  num_heads: int = 12  # N
  mlp_dim: int = 3072  # F
  max_len: int = 512  # rows of the position table
  position_offset: int = 0  # added to positions (RoBERTa: pad_id + 1)
  position_init: str = "normal"  # "normal" or "sinusoidal" (layers.position_init)
  type_vocab_size: int = 2  # token types (segments A/B)
  activation: str = "gelu"  # MLP and MLM-transform activation
  norm_eps: float = 1e-12  # LayerNorm epsilon
  pooler: bool = True  # tanh dense on the first token -> "pooled"
  nsp_head: bool = True  # 2-way sentence head on "pooled" -> "nsp_logits"
  attention_impl: str = "auto"  # see layers.attention
  head_dim: int = 0  # H; 0: embed_dim // num_heads (head pruning sets it)
  alibi: bool = False  # add ALiBi's linear distance bias to every layer
  trigram_input: bool = False  # embed [next, own, previous] tokens: 3D -> D

  def block(self) -> blocks.BlockConfig:
    """The BlockConfig of every layer."""
    if not self.head_dim and self.embed_dim % self.num_heads:
      raise ValueError(f"embed_dim {self.embed_dim} is not divisible by "
                       f"num_heads {self.num_heads}")
    return blocks.BlockConfig(
        num_heads=self.num_heads,
        head_dim=self.head_dim or self.embed_dim // self.num_heads,
        mlp_dim=self.mlp_dim, activation=self.activation,
        norm_eps=self.norm_eps, dropout_rate=self.dropout_rate,
        attention_dropout_rate=self.attention_dropout_rate,
        adapter_dim=self.adapter_dim, pal_dim=self.pal_dim,
        pal_heads=self.pal_heads, dtype=self.dtype,
        attention_impl=self.attention_impl)


SIZES = {
    "tiny": dict(vocab_size=512, num_layers=2, embed_dim=64, num_heads=4,
                 mlp_dim=128, max_len=128),
    # Turc et al. 2019 (well-read students): BERT-small, 4 x 512.
    "small": dict(num_layers=4, embed_dim=512, num_heads=8, mlp_dim=2048),
    "base": dict(),
    "large": dict(num_layers=24, embed_dim=1024, num_heads=16, mlp_dim=4096),
}

FAMILY_DEFAULTS = {
    "roberta": dict(position_offset=2, type_vocab_size=1, norm_eps=1e-5,
                    nsp_head=False),
}


def encoder_mask(tokens: Array, pad_id: int, segment_ids: Array | None,
                 mask: Array | None):
  """The self-attention mask of an encoder over `masks.real_segments`:
  `masks.Segmented` (which fused kernels read), or a [B, T, T] bool array
  when an extra `mask` is AND-ed in (`masks.self_attention`)."""
  return masks.self_attention(
      masks.real_segments(tokens, pad_id, segment_ids), extra=mask)


def gather_positions(x: Array, at: Array | None) -> Array:
  """x [B, T, ...] at positions at [B, K] int -> [B, K, ...]; None = all."""
  if at is None:
    return x
  if at.ndim != 2 or at.shape[0] != x.shape[0]:
    raise ValueError(f"logits_at {at.shape} must be [B, K] with B = "
                     f"{x.shape[0]}")
  return jnp.take_along_axis(x, at.reshape(at.shape + (1,) * (x.ndim - 2)),
                             axis=1)


def trigram(e: Array, segments: Array) -> Array:
  """e [B, T, E], segments [B, T] -> [B, T, 3E]: each token's next, own and
  previous embeddings; zeros beyond the row, and where a token and its
  neighbour are real tokens of two documents (padding reads as it is)."""
  pad_t = lambda x, before, after, value: jnp.pad(
      x, [(0, 0), (before, after)] + [(0, 0)] * (x.ndim - 2),
      constant_values=value)

  def keep(other: Array) -> Array:
    return ((other == segments) | (segments == 0) | (other == 0))[..., None]

  nxt = jnp.where(keep(pad_t(segments[:, 1:], 0, 1, -1)),
                  pad_t(e[:, 1:], 0, 1, 0), 0.0)
  prev = jnp.where(keep(pad_t(segments[:, :-1], 1, 0, -1)),
                   pad_t(e[:, :-1], 1, 0, 0), 0.0)
  return jnp.concatenate([nxt, e, prev], -1)


class Embeddings(nn.Module):
  """Token + position + token-type embeddings, LayerNorm, dropout.

  Attributes:
    vocab_size: V.
    features: E, the embedding width (D unless factorised, as in ALBERT).
    max_len: rows of the position table.
    type_vocab_size: token types; 0 = no token-type table (DistilBERT).
    norm_eps: LayerNorm epsilon.
    dropout_rate: dropout on the output.
    dtype: compute dtype name (for the tied `attend`).
    position_init: "normal" or "sinusoidal" (`layers.position_init`).
    trigram: each token embedded with its next and previous neighbours
      (`trigram`, MobileBERT's input), mapped back to E by a dense layer.
  """
  vocab_size: int
  features: int
  max_len: int
  type_vocab_size: int = 2
  norm_eps: float = 1e-12
  dropout_rate: float = 0.1
  dtype: str = "float32"
  position_init: str = "normal"
  trigram: bool = False

  def setup(self):
    self.token = layers.Embed(self.vocab_size, self.features,
                              dtype=self.dtype)
    if self.trigram:
      self.trigram_dense = layers.Dense(self.features, ("embed", "embed_out"),
                                        dtype=self.dtype)
    self.position = layers.Embed(
        self.max_len, self.features, axes=("positions", "embed"),
        embedding_init=layers.position_init(self.position_init))
    if self.type_vocab_size:
      self.token_type = layers.Embed(self.type_vocab_size, self.features,
                                     axes=("classes", "embed"))
    self.norm = layers.LayerNorm(self.norm_eps)
    self.dropout = layers.Dropout(self.dropout_rate)

  def __call__(self, tokens: Array, positions: Array,
               token_types: Array | None, deterministic: bool,
               segments: Array | None = None) -> Array:
    """tokens, positions, token_types [B, T] int -> [B, T, E] float32
    (`segments` [B, T]: the documents a trigram stays within)."""
    x = self.token(tokens)
    if self.trigram:
      if segments is None:
        raise ValueError("trigram embeddings read the row's segments")
      x = self.trigram_dense(trigram(x, segments))
    x = x + self.position(positions)
    if self.type_vocab_size:
      types = jnp.zeros_like(tokens) if token_types is None else token_types
      x = x + self.token_type(types)
    return self.dropout(self.norm(x), deterministic=deterministic)

  def attend(self, x: Array) -> Array:
    """x [B, T, E] -> [B, T, V] logits against the token table."""
    return self.token.attend(x)


class MlmHead(nn.Module):
  """Dense, activation, LayerNorm, then tied logits plus a bias.

  Attributes:
    features: width of the transform (E of the token table).
    activation: activation name.
    norm_eps: LayerNorm epsilon.
    dtype: compute dtype name.
  """
  features: int
  activation: str = "gelu"
  norm_eps: float = 1e-12
  dtype: str = "float32"

  @nn.compact
  def __call__(self, x: Array, embed: Embeddings) -> Array:
    """x [B, T, D] -> logits [B, T, V] float32 (tied to `embed`)."""
    h = layers.Dense(self.features, ("embed", "embed_out"), dtype=self.dtype,
                     name="transform")(x)
    h = layers.LayerNorm(self.norm_eps, name="norm")(
        layers.activation_fn(self.activation)(h))
    bias = layers.param_with_axes(self, "bias", nn.initializers.zeros,
                                  (embed.vocab_size,), ("vocab",))
    return embed.attend(h) + bias


class Model(nn.Module):
  """BERT / RoBERTa encoder with pooler, NSP and MLM heads.

  Attributes:
    config: a `Config`.
  """
  config: Config

  def setup(self):
    c = self.config
    self.embeddings = Embeddings(
        c.vocab_size, c.embed_dim, c.max_len, c.type_vocab_size, c.norm_eps,
        c.dropout_rate, c.dtype, c.position_init, c.trigram_input)
    self.encoder = blocks.Stack(c.block(), c.num_layers, scan=c.scan_layers,
                                remat=c.remat)
    if c.pooler:
      self.pooler = layers.Dense(c.embed_dim, ("embed", "embed_out"),
                                 dtype=c.dtype)
    if c.pooler and c.nsp_head:
      self.nsp = layers.Dense(2, ("embed", "classes"), dtype=c.dtype)
    self.mlm = MlmHead(c.embed_dim, c.activation, c.norm_eps, c.dtype)

  def __call__(self, tokens: Array, *, segment_ids: Array | None = None,
               token_types: Array | None = None,
               positions: Array | None = None, mask: Array | None = None,
               deterministic: bool = True, return_logits: bool = True,
               logits_at: Array | None = None) -> dict[str, Array]:
    """Encodes tokens.

    Args:
      tokens: [B, T] int32.
      segment_ids: [B, T] int32, 0 = padding; attention stays within equal
        ids. None = (tokens != pad_id).
      token_types: [B, T] int32 segment A/B ids; None = zeros.
      positions: [B, T] int32; None = arange(T).
      mask: [B, T, T] bool, AND-ed with the segment mask.
      deterministic: no dropout when True.
      return_logits: compute the MLM logits.
      logits_at: [B, K] int32 positions: the MLM head runs on the hidden
        states there only, and "logits" is [B, K, V]. A masked LM predicts
        ~15% of the tokens, so this skips most of the V x D projection.

    Returns:
      "hidden" [B, T, D], "layers" L+1 x [B, T, D] (embeddings first),
      "logits" [B, T, V] or [B, K, V] (if return_logits), "pooled" [B, D] and
      "nsp_logits" [B, 2] (if the config has them); all float32.
    """
    c = self.config
    attn_mask = encoder_mask(tokens, c.pad_id, segment_ids, mask)
    pos = layers.arange_positions(tokens, positions) + c.position_offset
    x = self.embeddings(tokens, pos, token_types, deterministic,
                        masks.real_segments(tokens, c.pad_id, segment_ids))
    bias = (positions_lib.alibi_bias(pos, c.num_heads) if c.alibi else None)
    h, hs = self.encoder(x, attn_mask, bias, deterministic=deterministic)
    out = {"hidden": h, "layers": (x,) + hs}
    if return_logits:
      out["logits"] = self.mlm(gather_positions(h, logits_at),
                               self.embeddings)
    if c.pooler:
      out["pooled"] = jnp.tanh(self.pooler(h[:, 0]))
      if c.nsp_head:
        out["nsp_logits"] = self.nsp(out["pooled"])
    return out
