"""MobileBERT: a deep, thin BERT of bottlenecked blocks.

Sun et al. 2020, as Hugging Face's `MobileBertModel` and
`MobileBertForMaskedLM` run it. Tokens embed into E dimensions; with
`trigram_input` each token's embedding is concatenated with its next and
previous neighbours' (a width-3 convolution) and a dense maps the 3E to the
inter-block width D. Every layer then:

  - maps x [B, T, D] into the intra-block width I (`input_bottleneck`), the
    residual of the attention; queries and keys read a second bottleneck
    (`attention_bottleneck`, `key_query_shared_bottleneck`) and values read
    x, or all three read the input bottleneck (`use_bottleneck_attention`);
  - attends (N heads of I / N) and norms the residual sum;
  - runs `num_feedforward_networks` - 1 stacked FFNs (I -> F -> I, each with
    its residual and norm), then the last FFN, whose sum is normed and mapped
    back to D (`output_bottleneck`), added to x and normed.

Without `use_bottleneck` the block is BERT's post-LN layer at I = D. The
norms are NoNorm (x * scale + bias, `normalization_type="no_norm"`) or
LayerNorm. The MLM head transforms D -> D (always LayerNorm), then scores
the first E features against the token table and the other D - E against
its own [D - E, V] matrix (`extra`). The pooler is the first token, through
a tanh dense when `classifier_activation`.

Packing: attention stays within a document (`segment_ids`), and a token's
trigram reads zeros where its neighbour belongs to another document, as
at a row's edges; a neighbour on padding is read as it is (the pad
token's embedding), as the reference reads it.

Letters: B batch, T length, D inter-block width, I intra-block width, E
embedding width, N heads, H head dim (I / N), F mlp, V vocab, L layers.
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
NORMS = ("no_norm", "layer_norm")
# The reference builds two of its LayerNorms (the embeddings' and each
# layer's last FFN's) without its `layer_norm_eps`: torch's default holds.
REFERENCE_EPS = 1e-5


@dataclasses.dataclass(frozen=True)
class Config:
  """MobileBERT hyper-parameters (field names shared with BERT's)."""
  vocab_size: int = 30522  # V
  pad_id: int = 0  # padding token id
  dtype: str = "float32"  # compute dtype of matmuls; params stay float32
  dropout_rate: float = 0.0  # on embeddings and sub-layer outputs
  attention_dropout_rate: float = 0.1  # on attention probabilities
  scan_layers: bool = False  # one nn.scan over the layers
  remat: str = "none"  # backward recomputation: blocks.REMAT (or a bool)
  adapter_dim: int = 0  # >0: bottleneck adapters in every layer
  num_layers: int = 24  # L
  embed_dim: int = 512  # D: the width between blocks
  num_heads: int = 4  # N
  mlp_dim: int = 512  # F
  max_len: int = 512  # rows of the position table
  position_init: str = "normal"  # "normal" or "sinusoidal"
  type_vocab_size: int = 2  # token types (segments A/B)
  activation: str = "relu"  # FFN and MLM-transform activation
  norm_eps: float = 1e-12  # LayerNorm epsilon (see REFERENCE_EPS)
  pooler: bool = True  # the first token -> "pooled"
  nsp_head: bool = True  # 2-way sentence head on "pooled" -> "nsp_logits"
  attention_impl: str = "auto"  # see layers.attention
  embedding_dim: int = 128  # E: token-table width
  trigram_input: bool = True  # embed [next, own, previous] tokens: 3E -> D
  use_bottleneck: bool = True  # blocks run at I = intra_dim, else at D
  intra_dim: int = 128  # I: the width inside a block (with use_bottleneck)
  use_bottleneck_attention: bool = False  # q, k, v read the input bottleneck
  key_query_shared_bottleneck: bool = True  # q, k read their own bottleneck
  num_feedforward_networks: int = 4  # stacked FFNs per layer
  normalization_type: str = "no_norm"  # "no_norm" (x * w + b) | "layer_norm"
  classifier_activation: bool = True  # pooler: tanh dense on the first token

  @property
  def inner_dim(self) -> int:
    """I: the width of attention and FFNs."""
    return self.intra_dim if self.use_bottleneck else self.embed_dim

  def __post_init__(self):
    if self.normalization_type not in NORMS:
      raise ValueError(f"mobilebert normalization_type "
                       f"{self.normalization_type!r} is not one of {NORMS}")
    if self.inner_dim % self.num_heads:
      raise ValueError(f"mobilebert intra-block width {self.inner_dim} is "
                       f"not divisible by num_heads {self.num_heads}")
    if self.embedding_dim > self.embed_dim:
      raise ValueError(f"mobilebert embedding_dim {self.embedding_dim} "
                       f"exceeds embed_dim {self.embed_dim}: the MLM head "
                       "scores the first E of D features against the table")
    if (self.use_bottleneck and not self.use_bottleneck_attention
        and not self.key_query_shared_bottleneck
        and self.intra_dim != self.embed_dim):
      raise ValueError("mobilebert with use_bottleneck but neither "
                       "key_query_shared_bottleneck nor "
                       "use_bottleneck_attention projects queries of width "
                       f"embed_dim {self.embed_dim} with weights of width "
                       f"intra_dim {self.intra_dim}; make them equal")
    if self.num_feedforward_networks < 1 or self.type_vocab_size < 1:
      raise ValueError("mobilebert needs num_feedforward_networks >= 1 and "
                       "type_vocab_size >= 1")


SIZES = {
    # Not the paper's MobileBERT-TINY: the zoo's smallest, for tests.
    "tiny": dict(vocab_size=512, num_layers=2, embed_dim=64, intra_dim=32,
                 embedding_dim=32, num_heads=4, mlp_dim=64, max_len=128,
                 num_feedforward_networks=2),
    # google/mobilebert-uncased: 24 x (512 <-> 128), 4 FFNs, 25M params.
    "base": dict(classifier_activation=False),
}


class NoNorm(nn.Module):
  """MobileBERT's NoNorm: x * scale + bias, no statistics."""

  @nn.compact
  def __call__(self, x: Array) -> Array:
    """x [..., D] -> [..., D] float32."""
    d = x.shape[-1]
    scale = layers.param_with_axes(self, "scale", nn.initializers.ones, (d,),
                                   ("embed",))
    bias = layers.param_with_axes(self, "bias", nn.initializers.zeros, (d,),
                                  ("embed",))
    return x.astype(jnp.float32) * scale + bias


def make_norm(config: Config, name: str, eps: float | None = None):
  """The config's norm module: NoNorm, or LayerNorm at `eps`."""
  if config.normalization_type == "no_norm":
    return NoNorm(name=name)
  return layers.LayerNorm(config.norm_eps if eps is None else eps, name=name)


class Embeddings(nn.Module):
  """Tokens (E wide, trigram, dense to D) + positions + types, norm, dropout.

  Attributes:
    config: a `Config`.
  """
  config: Config

  def setup(self):
    c = self.config
    self.token = layers.Embed(c.vocab_size, c.embedding_dim, dtype=c.dtype)
    self.position = layers.Embed(
        c.max_len, c.embed_dim, axes=("positions", "embed"),
        embedding_init=layers.position_init(c.position_init))
    self.token_type = layers.Embed(c.type_vocab_size, c.embed_dim,
                                   axes=("classes", "embed"))
    if c.trigram_input or c.embedding_dim != c.embed_dim:
      self.transform = layers.Dense(c.embed_dim, ("embed", "embed_out"),
                                    dtype=c.dtype)
    self.norm = make_norm(c, "norm", REFERENCE_EPS)
    self.dropout = layers.Dropout(c.dropout_rate)

  def __call__(self, tokens: Array, positions: Array,
               token_types: Array | None, segments: Array,
               deterministic: bool) -> Array:
    """tokens, positions, token_types, segments [B, T] int -> [B, T, D]."""
    c = self.config
    e = self.token(tokens)
    if c.trigram_input:
      e = bert.trigram(e, segments)
    if c.trigram_input or c.embedding_dim != c.embed_dim:
      e = self.transform(e)
    types = jnp.zeros_like(tokens) if token_types is None else token_types
    x = e + self.position(positions) + self.token_type(types)
    return self.dropout(self.norm(x), deterministic=deterministic)

  def attend(self, x: Array) -> Array:
    """x [B, T, E] -> [B, T, V] logits against the token table."""
    return self.token.attend(x)


# ----------------------------------------------------------------- layers ---


class Attention(nn.Module):
  """Multi-head attention whose values may read another input than the
  queries and keys. Params: query, key [I, N, H], value [I|D, N, H]
  (`embed, heads, kv`), out [N, H, I]; all with biases.

  Attributes:
    config: a `Config`.
    deterministic: no dropout when True.
  """
  config: Config
  deterministic: bool = True

  @nn.compact
  def __call__(self, qk_in: Array, v_in: Array, mask) -> Array:
    """qk_in [B, T, I], v_in [B, T, I|D] -> [B, T, I] float32."""
    c = self.config
    shape = (c.num_heads, c.inner_dim // c.num_heads)
    proj = lambda name: layers.Dense(shape, ("embed", "heads", "kv"),
                                     dtype=c.dtype, name=name)
    dropout = None
    if c.attention_dropout_rate > 0 and not self.deterministic:
      dropout = layers.Dropout(c.attention_dropout_rate,
                               deterministic=False).keyed()
    out = layers.attention(proj("query")(qk_in), proj("key")(qk_in),
                           proj("value")(v_in), mask=mask, dtype=c.dtype,
                           impl=c.attention_impl, dropout=dropout)
    return layers.Dense(c.inner_dim, ("heads", "kv", "embed"), in_dims=2,
                        dtype=c.dtype, name="out")(out)


def _activation(x: Array) -> Array:
  """x [B, T, I|D] constrained to the stack's activation axes.

  Every bottleneck-wide activation gets the layout of the stack's
  activations. Left to propagation, the partitioner of this stack (jax
  0.10, GSPMD and Shardy alike) gave the attention output and the stacked
  feed-forward outputs of the rows on (data 0, fsdp 1) and (data 1,
  fsdp 0) each other's values on the 2x2x2 CPU mesh (caught by
  `test_outputs_axes_and_sharded_forward`, per row)."""
  return nn.with_logical_constraint(x, blocks.ACTIVATION_AXES)


class Layer(nn.Module):
  """One MobileBERT layer (the module docstring's list).

  Attributes:
    config: a `Config`.
    deterministic: no dropout when True.
  """
  config: Config
  deterministic: bool = True

  def _bottleneck(self, x: Array, name: str) -> Array:
    """x [B, T, D] -> [B, T, I]: dense and norm."""
    c = self.config
    h = layers.Dense(c.intra_dim, ("embed", "embed_out"), dtype=c.dtype,
                     name=name)(x)
    return make_norm(c, f"{name}_norm")(h)

  def _inputs(self, x: Array) -> tuple[Array, Array, Array]:
    """x [B, T, D] -> (query/key input [B, T, I], value input [B, T, I|D],
    attention residual [B, T, I])."""
    c = self.config
    if not c.use_bottleneck:
      return x, x, x
    inp = self._bottleneck(x, "input_bottleneck")
    if c.use_bottleneck_attention:
      return inp, inp, inp
    if c.key_query_shared_bottleneck:
      return self._bottleneck(x, "attention_bottleneck"), x, inp
    return x, x, inp

  def _residual(self, h: Array, residual: Array, name: str, drop: bool,
                eps: float | None = None) -> Array:
    """norm(residual + adapter(dropout(h))), h and residual [B, T, *]."""
    c = self.config
    if drop:
      h = layers.Dropout(c.dropout_rate)(h, deterministic=self.deterministic)
    if c.adapter_dim:
      h = layers.Adapter(c.adapter_dim, c.dtype, name=f"adapter_{name}")(h)
    return make_norm(c, f"{name}_norm", eps)(h + residual)

  @nn.compact
  def __call__(self, x: Array, mask) -> Array:
    """x [B, T, D], mask (see `layers.attention`) -> [B, T, D] float32."""
    c = self.config
    qk_in, v_in, residual = map(_activation, self._inputs(x))
    a = _activation(Attention(c, self.deterministic, name="attention")(
        qk_in, v_in, mask))
    a = _activation(self._residual(a, residual, "attention",
                                   not c.use_bottleneck))
    mlp = lambda name: layers.Mlp(c.mlp_dim, c.activation, dtype=c.dtype,
                                  name=name)
    for j in range(c.num_feedforward_networks - 1):
      a = _activation(make_norm(c, f"ffn_{j}_norm")(a + mlp(f"ffn_{j}")(a)))
    h = _activation(mlp("mlp")(a))
    if not c.use_bottleneck:
      return self._residual(h, a, "mlp", True, REFERENCE_EPS)
    h = make_norm(c, "mlp_norm", REFERENCE_EPS)(h + a)
    h = layers.Dense(c.embed_dim, ("embed_out", "embed"), dtype=c.dtype,
                     name="output_bottleneck")(h)
    return self._residual(h, x, "output_bottleneck", True)


# ------------------------------------------------------------------ model ---


class MlmHead(nn.Module):
  """Dense D -> D, activation, LayerNorm; then the first E features score
  against the token table and the other D - E against `extra`, plus a bias.

  Attributes:
    config: a `Config`.
  """
  config: Config

  @nn.compact
  def __call__(self, x: Array, embed: Embeddings) -> Array:
    """x [B, T, D] -> logits [B, T, V] float32."""
    c = self.config
    h = layers.Dense(c.embed_dim, ("embed", "embed_out"), dtype=c.dtype,
                     name="transform")(x)
    h = layers.LayerNorm(c.norm_eps, name="norm")(
        layers.activation_fn(c.activation)(h))
    e = c.embedding_dim
    logits = embed.attend(h[..., :e])
    if c.embed_dim > e:
      extra = layers.param_with_axes(
          self, "extra", layers.default_init, (c.embed_dim - e, c.vocab_size),
          ("embed", "vocab"))
      logits = logits + layers.einsum("btd,dv->btv", h[..., e:], extra,
                                      layers.compute_dtype(c.dtype))
    bias = layers.param_with_axes(self, "bias", nn.initializers.zeros,
                                  (c.vocab_size,), ("vocab",))
    return logits + bias


class Model(nn.Module):
  """MobileBERT encoder with pooler, NSP and MLM heads.

  Attributes:
    config: a `Config`.
  """
  config: Config

  def setup(self):
    c = self.config
    self.embeddings = Embeddings(c)
    self.encoder = blocks.LayerStack(Layer, c)
    if c.pooler and c.classifier_activation:
      self.pooler = layers.Dense(c.embed_dim, ("embed", "embed_out"),
                                 dtype=c.dtype)
    if c.pooler and c.nsp_head:
      self.nsp = layers.Dense(2, ("embed", "classes"), dtype=c.dtype)
    self.mlm = MlmHead(c)

  def __call__(self, tokens: Array, *, segment_ids: Array | None = None,
               token_types: Array | None = None,
               positions: Array | None = None, mask: Array | None = None,
               deterministic: bool = True, return_logits: bool = True,
               logits_at: Array | None = None) -> dict[str, Array]:
    """Encodes tokens; arguments as `bert.Model.__call__` (segment_ids also
    bound the trigram).

    Returns:
      "hidden" [B, T, D], "layers" L+1 x [B, T, D] (embeddings first),
      "logits" [B, T, V] or [B, K, V] at `logits_at` (if return_logits),
      "pooled" [B, D] and "nsp_logits" [B, 2] (if the config has them);
      all float32.
    """
    c = self.config
    segments = masks.real_segments(tokens, c.pad_id, segment_ids)
    attn_mask = bert.encoder_mask(tokens, c.pad_id, segment_ids, mask)
    pos = layers.arange_positions(tokens, positions)
    x = self.embeddings(tokens, pos, token_types, segments, deterministic)
    hs = self.encoder(x, attn_mask, deterministic=deterministic)
    h = hs[-1]
    out = {"hidden": h, "layers": (x,) + hs}
    if return_logits:
      out["logits"] = self.mlm(bert.gather_positions(h, logits_at),
                               self.embeddings)
    if c.pooler:
      pooled = h[:, 0]
      if c.classifier_activation:
        pooled = jnp.tanh(self.pooler(pooled))
      out["pooled"] = pooled
      if c.nsp_head:
        out["nsp_logits"] = self.nsp(pooled)
    return out
