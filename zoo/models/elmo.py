"""ELMo: forward and backward LSTM language models over one token layer.

Peters et al. 2018. A context-free token layer (a token-embedding table, or
a character CNN with highway layers over per-token character ids) feeds L
stacked LSTMs with a projection (memory cells C, projected state D) in each
direction; every layer above the first adds its input back (a residual).
The forward LM at position t predicts token t+1, the backward LM predicts
t-1; one softmax (its own table, or the token table when tied) serves both.
Every layer is returned, forward|backward concatenated, for a scalar mix.
With `adapter_dim > 0` a bottleneck adapter follows every LSTM layer.

LSTM states restart wherever `segment_ids` changes, so packed documents
never see each other; the forward states at t depend on tokens <= t only,
the backward states on tokens >= t only.

Letters: B batch, T length, D projected width, C memory cells, V vocab,
K characters per token, E character-embedding width, F char-CNN filters.
"""

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from zoo.models import layers as layers_lib
from zoo.models import lstm as lstm_lib

INTERFACE = "lstm"
ACTIVATION_AXES = ("batch", "length", "embed")

# ELMo's character-CNN filters: (width, count) pairs, 2048 filters in all.
ELMO_FILTERS = ((1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512),
                (7, 1024))
# Character ids: 0 pads, byte b is b + 1, then the word markers.
CHAR_PAD, BOW_CHAR, EOW_CHAR, CHAR_VOCAB = 0, 257, 258, 262


@dataclasses.dataclass(frozen=True)
class Config:
  """ELMo hyper-parameters."""
  vocab_size: int = 32128  # V: softmax size (and token table size)
  pad_id: int = 0  # padding token id
  dtype: str = "float32"  # compute dtype of matmuls; params stay float32
  dropout_rate: float = 0.1  # dropout on the token layer and LSTM outputs
  scan_layers: bool = False  # unsupported: layer 0 has no residual
  remat: bool = False  # recompute each LSTM layer in the backward pass
  adapter_dim: int = 0  # >0: a bottleneck adapter after every LSTM layer
  num_layers: int = 2  # L biLSTM layers
  embed_dim: int = 512  # D: token-layer width and LSTM projection
  lstm_dim: int = 4096  # C: LSTM memory cells per direction
  cell_clip: float = 3.0  # memory cells clipped to [-clip, clip]
  proj_clip: float = 3.0  # projected states clipped to [-clip, clip]
  char_cnn: bool = False  # token layer from characters, not a table
  max_chars: int = 50  # K: characters per token (char-CNN only)
  char_embed_dim: int = 16  # E: character-embedding width
  char_filters: tuple = ELMO_FILTERS  # (width, count) per convolution
  num_highway: int = 2  # highway layers after the char CNN
  tie_embeddings: bool = False  # softmax reuses the token table


# small/base/large are the released small, medium and original ELMo models
# (the paper's model is the original: 4096 cells, 512 projection).
SIZES = {
    "tiny": dict(vocab_size=512, embed_dim=32, lstm_dim=64, max_chars=12,
                 char_embed_dim=8, char_filters=((1, 8), (2, 8), (3, 16)),
                 num_highway=1),
    "small": dict(embed_dim=128, lstm_dim=1024, num_highway=1),
    "base": dict(embed_dim=256, lstm_dim=2048, num_highway=1),
    "large": dict(embed_dim=512, lstm_dim=4096, num_highway=2),
}


def char_table(pieces: list[str], max_chars: int) -> np.ndarray:
  """Character ids of every vocabulary piece, for `chars = table[tokens]`.

  Args:
    pieces: the V vocabulary strings, indexed by token id.
    max_chars: K; longer pieces are cut (the end-of-word marker is kept).

  Returns:
    int32 [V, K]: begin-of-word, UTF-8 bytes + 1, end-of-word, 0 padding.
  """
  if max_chars < 3:
    raise ValueError(f"max_chars must be >= 3, got {max_chars}")
  table = np.zeros((len(pieces), max_chars), np.int32)
  for i, piece in enumerate(pieces):
    body = [b + 1 for b in piece.encode("utf-8")][:max_chars - 2]
    ids = [BOW_CHAR] + body + [EOW_CHAR]
    table[i, :len(ids)] = ids
  return table


class CharCNN(nn.Module):
  """Token vectors from character ids: convolutions, max-pool, highway."""
  config: Config

  @nn.compact
  def __call__(self, chars):
    """chars [B,T,K] int32 -> [B,T,D] float32."""
    cfg = self.config
    if chars.shape[-1] < max(w for w, _ in cfg.char_filters):
      raise ValueError(f"chars has {chars.shape[-1]} characters per token, "
                       "fewer than the widest char filter")
    table = lstm_lib.param(self, "char_embedding", nn.initializers.normal(1.0),
                   (CHAR_VOCAB, cfg.char_embed_dim), ("char_vocab", None))
    x = jnp.take(table, chars, axis=0)
    pooled = [self._conv(x, w, n, i) for i, (w, n) in
              enumerate(cfg.char_filters)]
    h = jnp.concatenate(pooled, axis=-1)
    for i in range(cfg.num_highway):
      h = self._highway(h, i)
    w = lstm_lib.param(self, "proj_kernel", nn.initializers.lecun_normal(),
               (h.shape[-1], cfg.embed_dim), ("mlp", "embed"))
    b = lstm_lib.param(self, "proj_bias", nn.initializers.zeros, (cfg.embed_dim,),
               ("embed",))
    return lstm_lib.dot("btf,fd->btd", h, w, cfg.dtype) + b

  def _conv(self, x, width, count, i):
    """Max over positions of one convolution, then ReLU: [B,T,count]."""
    k, e = x.shape[-2], x.shape[-1]
    w = lstm_lib.param(self, f"conv{i}_kernel", nn.initializers.lecun_normal(),
               (width, e, count), (None, None, "mlp"))
    b = lstm_lib.param(self, f"conv{i}_bias", nn.initializers.zeros, (count,),
               ("mlp",))
    span = k - width + 1
    out = sum(lstm_lib.dot("btke,ef->btkf", x[:, :, j:j + span], w[j],
                   self.config.dtype) for j in range(width))
    return jax.nn.relu(jnp.max(out + b, axis=2))

  def _highway(self, h, i):
    """gate * h + (1 - gate) * relu(W h): [B,T,F] -> [B,T,F]."""
    f = h.shape[-1]
    w = lstm_lib.param(self, f"highway{i}_kernel", nn.initializers.lecun_normal(),
               (f, 2 * f), (None, "mlp"))
    # Gate bias 1 favours carrying h through unchanged early in training.
    b = lstm_lib.param(self, f"highway{i}_bias",
               lambda k, s, d=jnp.float32: jnp.zeros(s, d).at[f:].set(1.0),
               (2 * f,), ("mlp",))
    z = lstm_lib.dot("btf,fg->btg", h, w, self.config.dtype) + b
    nonlinear, gate = jnp.split(z, 2, axis=-1)
    gate = jax.nn.sigmoid(gate)
    return gate * h + (1.0 - gate) * jax.nn.relu(nonlinear)


class Model(nn.Module):
  """ELMo biLM: token layer, L projected biLSTM layers, shared softmax."""
  config: Config

  @nn.compact
  def __call__(self, tokens, *, segment_ids=None, chars=None,
               deterministic: bool = True) -> dict[str, Any]:
    """Runs both language models.

    Args:
      tokens: int32 [B,T] token ids.
      segment_ids: int32 [B,T]; 0 = padding; LSTM states restart wherever it
        changes. None -> (tokens != pad_id).
      chars: int32 [B,T,K] character ids (required with `char_cnn`; see
        `char_table`).
      deterministic: False enables dropout (needs a "dropout" rng).

    Returns:
      "forward_logits" [B,T,V] (t predicts t+1), "backward_logits" [B,T,V]
      (t predicts t-1), "layers" tuple of L+1 [B,T,2D] float32 (the token
      layer twice, then each biLSTM layer forward|backward), "hidden" the
      last of them.
    """
    cfg = self.config
    _check(cfg, chars)
    if segment_ids is None:
      segment_ids = (tokens != cfg.pad_id).astype(jnp.int32)
    x = self._token_layer(tokens, chars)
    layers, fwd, bwd = self._bilstm(x, segment_ids, deterministic)
    logits = self._softmax(jnp.stack([fwd, bwd]))
    return {"forward_logits": logits[0], "backward_logits": logits[1],
            "layers": tuple(layers), "hidden": layers[-1]}

  def _bilstm(self, x, segment_ids, deterministic):
    """The L layers of both directions over token vectors x [B,T,D].

    Returns:
      (layers: L+1 x [B,T,2D], forward top [B,T,D], backward top [B,T,D]),
      the tops after dropout, as the softmax reads them.
    """
    cfg = self.config
    layers = [jnp.concatenate([x, x], axis=-1)]
    drop = layers_lib.Dropout(cfg.dropout_rate)
    fwd = bwd = drop(x, deterministic=deterministic)
    lstm_cls = nn.remat(lstm_lib.LSTM) if cfg.remat else lstm_lib.LSTM
    kw = dict(cells=cfg.lstm_dim, proj_dim=cfg.embed_dim,
              cell_clip=cfg.cell_clip, proj_clip=cfg.proj_clip, dtype=cfg.dtype)
    for i in range(cfg.num_layers):
      f = lstm_cls(**kw, name=f"forward_{i}")(fwd, segment_ids)
      b = lstm_cls(**kw, reverse=True, name=f"backward_{i}")(bwd, segment_ids)
      if cfg.adapter_dim:
        f = layers_lib.Adapter(cfg.adapter_dim, cfg.dtype,
                               name=f"adapter_forward_{i}")(f)
        b = layers_lib.Adapter(cfg.adapter_dim, cfg.dtype,
                               name=f"adapter_backward_{i}")(b)
      if i > 0:  # As in ELMo: no residual around the first layer.
        f, b = f + fwd, b + bwd
      f = nn.with_logical_constraint(f, ACTIVATION_AXES)
      b = nn.with_logical_constraint(b, ACTIVATION_AXES)
      layers.append(jnp.concatenate([f, b], axis=-1))
      fwd = drop(f, deterministic=deterministic)
      bwd = drop(b, deterministic=deterministic)
    return layers, fwd, bwd

  def _token_layer(self, tokens, chars):
    """Context-free token vectors [B,T,D] float32."""
    cfg = self.config
    if cfg.char_cnn:
      return CharCNN(cfg, name="char_cnn")(chars)
    table = lstm_lib.param(self, "token_embedding", nn.initializers.normal(1.0),
                   (cfg.vocab_size, cfg.embed_dim), ("vocab", "embed"))
    return jnp.take(table, tokens, axis=0)

  def _softmax(self, h):
    """Output layer shared by both LMs: [2,B,T,D] -> logits [2,B,T,V]."""
    cfg = self.config
    if cfg.tie_embeddings:
      table = self.get_variable("params", "token_embedding")
      w, eq = nn.meta.unbox(table), "...d,vd->...v"
    else:
      w = lstm_lib.param(self, "softmax_kernel", nn.initializers.lecun_normal(),
                 (cfg.embed_dim, cfg.vocab_size), ("embed", "vocab"))
      eq = "...d,dv->...v"
    bias = lstm_lib.param(self, "softmax_bias", nn.initializers.zeros,
                  (cfg.vocab_size,), ("vocab",))
    return lstm_lib.dot(eq, h, w, cfg.dtype) + bias


def _check(cfg: Config, chars) -> None:
  """Rejects configs and inputs the model cannot run, naming the problem."""
  if cfg.scan_layers:
    raise ValueError("elmo: scan_layers is not supported (its first layer "
                     "has no residual, so layers differ); set it False")
  if cfg.char_cnn and cfg.tie_embeddings:
    raise ValueError("elmo: tie_embeddings needs a token table, but "
                     "char_cnn=True builds tokens from characters")
  if cfg.char_cnn and chars is None:
    raise ValueError("elmo: char_cnn=True needs chars [B,T,K] (build them "
                     "with char_table(pieces, max_chars)[tokens])")
