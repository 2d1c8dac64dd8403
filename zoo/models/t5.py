"""T5: a pre-LN encoder-decoder with relative position biases.

Raffel et al. 2020, in its v1.1 form by default: RMSNorm (scale only),
no biases anywhere, attention logits unscaled (the 1/sqrt(H) lives in the
init), one relative position bias table per stack computed once and shared
by all its layers (bidirectional buckets in the encoder, causal ones in
the decoder, none in cross-attention), a gated-GELU MLP, and an LM head of
its own. The original T5 is the same code with `activation="relu"`,
`tie_embeddings=True` and `scale_logits=True` (decoder states scaled by
D**-0.5 before the tied head).

With `encoder_only=True` there is no decoder and the model follows the
encoder face of `zoo.models` (tokens in; "hidden", "layers", "logits" out).

Letters: B batch, T decoder length, S encoder length, D embed, N heads,
H head dim, F mlp, V vocab, L layers.
"""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from zoo.models import blocks
from zoo.models import layers
from zoo.models import seq2seq

Array = jax.Array
INTERFACE = "encdec"


@dataclasses.dataclass(frozen=True)
class Config:
  """T5 hyper-parameters (v1.1 defaults)."""
  vocab_size: int = 32128  # V
  pad_id: int = 0  # padding id; also the decoder start id
  dtype: str = "float32"  # compute dtype of matmuls; params stay float32
  dropout_rate: float = 0.1  # embeddings, sub-layer outputs, MLP, attention
  scan_layers: bool = False  # one nn.scan over each stack's layers
  remat: str = "none"  # backward recomputation: blocks.REMAT (or a bool)
  adapter_dim: int = 0  # >0: bottleneck adapters in every block
  num_layers: int = 12  # L of the encoder
  num_decoder_layers: int = 0  # L of the decoder; 0 = num_layers
  embed_dim: int = 768  # D
  num_heads: int = 12  # N
  head_dim: int = 64  # H (N*H need not equal D)
  mlp_dim: int = 2048  # F
  activation: str = "gated_gelu_tanh"  # v1.1; the original T5 used "relu"
  norm_eps: float = 1e-6  # RMSNorm epsilon
  relpos_buckets: int = 32  # relative position buckets
  relpos_max_distance: int = 128  # distances beyond share the last bucket
  relpos_from: str = "offsets"  # what the relative bias reads, see RELPOS_FROM
  tie_embeddings: bool = False  # LM head = token table transposed
  scale_logits: bool = False  # scale decoder states by D**-0.5 (orig. T5)
  encoder_only: bool = False  # no decoder; the encoder face
  init: str = "mesh_tf"  # "mesh_tf" (T5's) or "normal" (N(0, 0.02)), see INITS
  attention_impl: str = "auto"  # see layers.attention

  def block(self, decoder: bool) -> blocks.BlockConfig:
    """The BlockConfig of an encoder (or decoder) layer."""
    return blocks.BlockConfig(
        num_heads=self.num_heads, head_dim=self.head_dim,
        mlp_dim=self.mlp_dim, activation=self.activation, pre_norm=True,
        norm="rmsnorm", norm_eps=self.norm_eps, use_bias=False,
        attention_scale=1.0, cross_attention=decoder,
        dropout_rate=self.dropout_rate,
        attention_dropout_rate=self.dropout_rate,
        mlp_dropout_rate=self.dropout_rate, adapter_dim=self.adapter_dim,
        dtype=self.dtype, attention_impl=self.attention_impl,
        fan_in_init=self.init == "mesh_tf")


# Initialisations. "mesh_tf" is T5's (Mesh TensorFlow's, which Hugging
# Face's `T5PreTrainedModel._init_weights` reproduces): every kernel
# N(0, 1/fan_in), the attention query's N(0, 1/(D*H)) (so that unscaled
# logits start at unit scale), the relative bias table N(0, 1/D), token
# embeddings N(0, 1); an untied LM head is a fan-in kernel, N(0, 1/D), as
# in Mesh TF and T5X (Hugging Face draws it N(0, 1)). "normal": BERT's
# N(0, 0.02) for every kernel and bias table (token embeddings stay
# N(0, 1)); with it the tiny T5 is slower to learn to read its encoder
# (`bench/encoder_use.py --toy --init normal`).
INITS = ("mesh_tf", "normal")

# What a relative distance is. "offsets": the key's index in the row minus
# the query's (Mesh TF's, T5X's and Hugging Face's definition), one
# [1, N, T, S] bias shared by the batch; the `positions` arguments are then
# not read. "positions": the key's position minus the query's, from the
# `positions` arguments, one [B, N, T, S] bias per row. The two agree on
# every row whose segments are contiguous runs counting up by one (the rows
# `objectives.transforms.positions_from_segments` numbers, and left-padded
# prompts), since attention between segments is masked; they differ only
# for positions with gaps inside a segment.
RELPOS_FROM = ("offsets", "positions")

# T5 v1.1 sizes (the released t5-v1_1 checkpoints); tiny is for tests.
SIZES = {
    "tiny": dict(vocab_size=512, num_layers=2, embed_dim=64, num_heads=4,
                 head_dim=16, mlp_dim=128, relpos_buckets=8,
                 relpos_max_distance=16),
    "small": dict(num_layers=8, embed_dim=512, num_heads=6, head_dim=64,
                  mlp_dim=1024),
    "base": dict(),
    "large": dict(num_layers=24, embed_dim=1024, num_heads=16, head_dim=64,
                  mlp_dim=2816),
}


def interface(config: Config) -> str:
  """"encoder" for an encoder-only config, else "encdec"."""
  return "encoder" if config.encoder_only else INTERFACE


def _relpos_init(config: Config):
  """The relative bias table's initializer: N(0, 1/D) under "mesh_tf"."""
  if config.init == "mesh_tf":
    return nn.initializers.normal(config.embed_dim ** -0.5)
  return layers.default_init


class Stack(nn.Module):
  """Dropout, a shared relative bias, L pre-LN blocks, final RMSNorm.

  Attributes:
    config: the model `Config`.
    decoder: causal buckets and cross-attention blocks.
  """
  config: Config
  decoder: bool = False

  @nn.compact
  def __call__(self, x: Array, positions: Array, mask: Array,
               encoded: Array | None = None, cross_mask: Array | None = None,
               deterministic: bool = True) -> tuple[Array, tuple[Array, ...]]:
    """x [B,T,D] embeddings -> (final [B,T,D], L+1 states [B,T,D]).

    The states are the embeddings, each block's output, and (in place of
    the last block's) the normalised final output, as Hugging Face reports.
    """
    c = self.config
    if c.relpos_from == "offsets":
      positions = jnp.arange(x.shape[1])[None]
    bias = layers.RelativePositionBias(
        c.num_heads, c.relpos_buckets, c.relpos_max_distance,
        bidirectional=not self.decoder, embedding_init=_relpos_init(c),
        name="relpos")(positions, positions)
    drop = layers.Dropout(c.dropout_rate)
    x = drop(x, deterministic=deterministic)
    n = (c.num_decoder_layers or c.num_layers) if self.decoder else c.num_layers
    h, hs = blocks.Stack(c.block(self.decoder), n, scan=c.scan_layers,
                         remat=c.remat, name="stack")(
                             x, mask, bias, encoded, cross_mask,
                             deterministic=deterministic)
    h = layers.RMSNorm(c.norm_eps, name="final_norm")(h)
    h = drop(h, deterministic=deterministic)
    return h, (x,) + hs[:-1] + (h,)


class Model(seq2seq.EncoderDecoder):
  """T5 encoder-decoder (or encoder only).

  Attributes:
    config: a `Config`.
  """
  config: Config

  def setup(self):
    c = self.config
    self.token_embed = layers.Embed(c.vocab_size, c.embed_dim, dtype=c.dtype,
                                    embedding_init=nn.initializers.normal(1.0))
    self.encoder = Stack(c, decoder=False)
    if not c.encoder_only:
      self.decoder = Stack(c, decoder=True)
    if c.init not in INITS:
      raise ValueError(f"t5 init {c.init!r} is not one of {INITS}")
    if c.relpos_from not in RELPOS_FROM:
      raise ValueError(f"t5 relpos_from {c.relpos_from!r} is not one of "
                       f"{RELPOS_FROM}")
    if not c.tie_embeddings:
      self.lm_head = layers.Dense(c.vocab_size, ("embed", "vocab"),
                                  use_bias=False, dtype=c.dtype,
                                  kernel_init=layers.fan_in_init()
                                  if c.init == "mesh_tf"
                                  else layers.default_init)

  def __call__(self, tokens: Array, dec_tokens: Array | None = None, **kw):
    """`encdec` (enc_tokens, dec_tokens, ...) or, encoder-only, `encoder`.

    See `seq2seq.EncoderDecoder.encdec` and `encoder_face` for arguments
    and outputs.
    """
    if self.config.encoder_only:
      if dec_tokens is not None:
        raise ValueError("t5 with encoder_only=True takes no dec_tokens")
      return self.encoder_face(tokens, **kw)
    if dec_tokens is None:
      raise ValueError("t5 encoder-decoder needs dec_tokens [B,T] (targets "
                       "shifted right); set encoder_only=True for an encoder")
    return self.encdec(tokens, dec_tokens, **kw)

  def _embed(self, tokens: Array) -> Array:
    """tokens [B,*] -> [B,*,D] (T5 does not scale its embeddings)."""
    return self.token_embed(tokens)

  def encoder_face(self, tokens: Array, *, segment_ids: Array | None = None,
                   token_types: Array | None = None,
                   positions: Array | None = None, mask: Array | None = None,
                   deterministic: bool = True,
                   return_logits: bool = True) -> dict[str, Array]:
    """The encoder face (encoder_only configs).

    Args:
      tokens: int32 [B,T].
      segment_ids: int32 [B,T], 0 = padding; None = (tokens != pad_id).
      token_types: must be None (T5 has no token types).
      positions: int32 [B,T]; None = arange(T); read only with
        `relpos_from="positions"`.
      mask: bool [B,T,T] extra attention mask.
      deterministic: no dropout when True.
      return_logits: compute "logits" with the LM head.

    Returns:
      "hidden" [B,T,D], "layers" L+1 x [B,T,D], "logits" [B,T,V]; float32.
    """
    if token_types is not None:
      raise ValueError("t5 has no token types; pass token_types=None")
    enc = self.encode(tokens, enc_segment_ids=segment_ids,
                      enc_positions=positions, mask=mask,
                      deterministic=deterministic)
    out = {"hidden": enc["encoder_hidden"], "layers": enc["encoder_layers"]}
    if return_logits:
      out["logits"] = self.lm_logits(out["hidden"])
    return out

  def lm_logits(self, h: Array) -> Array:
    """[B,T,D] -> [B,T,V] float32 through the tied or own head."""
    c = self.config
    if c.scale_logits:
      h = h * c.embed_dim ** -0.5
    if c.tie_embeddings:
      return self.token_embed.attend(h)
    return self.lm_head(h)
