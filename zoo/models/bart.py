"""BART: a post-LN transformer encoder-decoder with learned positions.

Lewis et al. 2020. Token embeddings (optionally scaled by sqrt(D)) plus
learned absolute positions read at `position + 2` (BART's offset: its table
has two extra leading rows), a LayerNorm on the embeddings, then post-LN
blocks with biases and GELU; cross-attention in the decoder; the LM head is
the token table transposed plus `final_logits_bias`. MASS pre-trains the
same encoder-decoder with another corruption.

Letters: B batch, T decoder length, S encoder length, D embed, N heads,
F mlp, V vocab, L layers.
"""

import dataclasses

import flax.linen as nn
import jax

from zoo.models import blocks
from zoo.models import layers
from zoo.models import seq2seq

Array = jax.Array
INTERFACE = "encdec"


@dataclasses.dataclass(frozen=True)
class Config:
  """BART hyper-parameters (bart-base defaults, our vocabulary's ids)."""
  vocab_size: int = 50265  # V
  pad_id: int = 0  # padding id (Hugging Face BART uses 1)
  decoder_start_id: int = 1  # first decoder input: eos, as BART does
  dtype: str = "float32"  # compute dtype of matmuls; params stay float32
  dropout_rate: float = 0.1  # embeddings and every sub-layer output
  attention_dropout_rate: float = 0.0  # on attention probabilities
  mlp_dropout_rate: float = 0.0  # on the MLP hidden activations
  scan_layers: bool = False  # one nn.scan over each stack's layers
  remat: str = "none"  # backward recomputation: blocks.REMAT (or a bool)
  adapter_dim: int = 0  # >0: bottleneck adapters in every block
  num_layers: int = 6  # L of the encoder
  num_decoder_layers: int = 0  # L of the decoder; 0 = num_layers
  embed_dim: int = 768  # D
  num_heads: int = 12  # N
  mlp_dim: int = 3072  # F
  max_len: int = 1024  # longest sequence the position tables cover
  position_offset: int = 2  # BART reads its tables at position + 2
  activation: str = "gelu"  # MLP activation
  norm_eps: float = 1e-5  # LayerNorm epsilon
  scale_embedding: bool = False  # multiply token embeddings by sqrt(D)
  attention_impl: str = "auto"  # see layers.attention

  def block(self, decoder: bool) -> blocks.BlockConfig:
    """The BlockConfig of an encoder (or decoder) layer."""
    if self.embed_dim % self.num_heads:
      raise ValueError(f"embed_dim {self.embed_dim} is not divisible by "
                       f"num_heads {self.num_heads}")
    return blocks.BlockConfig(
        num_heads=self.num_heads, head_dim=self.embed_dim // self.num_heads,
        mlp_dim=self.mlp_dim, activation=self.activation, pre_norm=False,
        norm="layernorm", norm_eps=self.norm_eps, use_bias=True,
        cross_attention=decoder, dropout_rate=self.dropout_rate,
        attention_dropout_rate=self.attention_dropout_rate,
        mlp_dropout_rate=self.mlp_dropout_rate, adapter_dim=self.adapter_dim,
        dtype=self.dtype, attention_impl=self.attention_impl)


# The paper defines base (6+6 layers) and large (12+12); tiny is for tests.
SIZES = {
    "tiny": dict(vocab_size=512, num_layers=2, embed_dim=64, num_heads=4,
                 mlp_dim=128, max_len=128),
    "base": dict(),
    "large": dict(num_layers=12, embed_dim=1024, num_heads=16, mlp_dim=4096),
}


class Stack(nn.Module):
  """Positions, embedding LayerNorm, dropout, then L post-LN blocks.

  Attributes:
    config: the model `Config`.
    decoder: cross-attention blocks.
  """
  config: Config
  decoder: bool = False

  @nn.compact
  def __call__(self, x: Array, positions: Array, mask: Array,
               encoded: Array | None = None, cross_mask: Array | None = None,
               deterministic: bool = True) -> tuple[Array, tuple[Array, ...]]:
    """x [B,T,D] token embeddings -> (final [B,T,D], L+1 x [B,T,D]).

    The states are the embedding output, then each block's output.
    """
    c = self.config
    _check_positions(positions, c.max_len)
    table = layers.Embed(c.max_len + c.position_offset, c.embed_dim,
                         axes=("positions", "embed"), name="position")
    x = x + table(positions + c.position_offset)
    x = layers.LayerNorm(c.norm_eps, name="embed_norm")(x)
    x = layers.Dropout(c.dropout_rate)(x, deterministic=deterministic)
    n = (c.num_decoder_layers or c.num_layers) if self.decoder else (
        c.num_layers)
    h, hs = blocks.Stack(c.block(self.decoder), n, scan=c.scan_layers,
                         remat=c.remat, name="stack")(
                             x, mask, None, encoded, cross_mask,
                             deterministic=deterministic)
    return h, (x,) + hs


def _check_positions(positions: Array, max_len: int) -> None:
  """Static check: sequences longer than the position table are an error."""
  if positions.shape[1] > max_len:
    raise ValueError(f"bart: length {positions.shape[1]} exceeds max_len "
                     f"{max_len} of the position table")


class Model(seq2seq.EncoderDecoder):
  """BART encoder-decoder with a tied LM head.

  Attributes:
    config: a `Config`.
  """
  config: Config

  def setup(self):
    c = self.config
    self.token_embed = layers.Embed(c.vocab_size, c.embed_dim, dtype=c.dtype)
    self.encoder = Stack(c, decoder=False)
    self.decoder = Stack(c, decoder=True)
    self.final_logits_bias = layers.param_with_axes(
        self, "final_logits_bias", nn.initializers.zeros, (c.vocab_size,),
        ("vocab",))

  def _embed(self, tokens: Array) -> Array:
    """tokens [B,T] -> [B,T,D], scaled by sqrt(D) when configured."""
    x = self.token_embed(tokens)
    if self.config.scale_embedding:
      x = x * self.config.embed_dim ** 0.5
    return x

  def __call__(self, enc_tokens: Array, dec_tokens: Array, **kw):
    """`encdec` (see `seq2seq.EncoderDecoder`)."""
    return self.encdec(enc_tokens, dec_tokens, **kw)

  def lm_logits(self, h: Array) -> Array:
    """[B,T,D] -> [B,T,V] float32: the tied head plus its bias."""
    return self.token_embed.attend(h) + self.final_logits_bias
