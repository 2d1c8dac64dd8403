"""AWD-LSTM: the regularised LSTM language model ULMFiT is built on.

Merity et al. 2018 ("Regularizing and optimizing LSTM language models");
Howard & Ruder 2018 (ULMFiT). A token table, L stacked LSTMs (hidden width
H, the last one back to the table's width E) and a softmax tied to the
table, with four dropouts, each drawn once per call from the "dropout" rng:

- embedding dropout: whole rows of the table (a piece is dropped at every
  position it occurs in the batch);
- locked (variational) dropout: one mask of features per row, the same at
  every step, on the LSTMs' input, between layers and on the output;
- weight drop: DropConnect on each LSTM's state-to-state kernel only
  (`lstm.LSTM.weight_drop`), the same dropped weights at every step.

Weight drop and embedding dropout draw one mask per call, not per row:
under gradient accumulation each microbatch draws its own.

Defaults are ULMFiT's language-model dropouts (fastai's AWD-LSTM: output
0.1, hidden 0.15, input 0.25, embedding 0.02, weights 0.2); the AWD-LSTM
paper's Penn Treebank values are 0.4, 0.3, 0.65, 0.1, 0.5. States restart
at every document (`segment_ids`), so packed documents never meet. AR and
TAR, the paper's activation penalties, read the outputs `dropped` and
`hidden` (`objectives.lm`'s `awd_lm`).

Letters: B batch, T length, E table width, H hidden width, V vocab.
"""

import dataclasses
from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from zoo.models import dropout
from zoo.models import lstm as lstm_lib

INTERFACE = "decoder"
ACTIVATION_AXES = ("batch", "length", "embed")


@dataclasses.dataclass(frozen=True)
class Config:
  """AWD-LSTM hyper-parameters."""
  vocab_size: int = 32128  # V
  pad_id: int = 0  # padding token id
  dtype: str = "float32"  # compute dtype of matmuls; params stay float32
  num_layers: int = 3  # L stacked LSTMs
  embed_dim: int = 400  # E: table width, and the last LSTM's width
  hidden_dim: int = 1152  # H: the other LSTMs' width
  dropout_rate: float = 0.1  # locked dropout on the output (softmax input)
  hidden_dropout: float = 0.15  # locked dropout between LSTM layers
  input_dropout: float = 0.25  # locked dropout on the LSTMs' input
  embed_dropout: float = 0.02  # dropout of whole table rows
  weight_drop: float = 0.2  # DropConnect on state-to-state kernels
  tie_embeddings: bool = True  # the softmax reuses the table
  scan_layers: bool = False  # unsupported: the last layer differs


SIZES = {
    "tiny": dict(vocab_size=512, num_layers=2, embed_dim=32, hidden_dim=64),
    "small": dict(),  # ULMFiT's: 3 layers, 400 / 1152
}


def _locked(module, x, rate, deterministic):
  """Locked dropout of x [B,T,D]: one feature mask per row, every step."""
  if deterministic or rate == 0.0:
    return x
  return dropout.drop(module.make_rng("dropout"), x, rate,
                      (x.shape[0], 1, x.shape[2]))


class Model(nn.Module):
  """AWD-LSTM: embedding, L LSTMs, tied softmax."""
  config: Config

  @nn.compact
  def __call__(self, tokens, *, segment_ids=None, deterministic: bool = True,
               return_logits: bool = True, logits_at=None,
               **unused) -> dict[str, Any]:
    """Runs the language model.

    Args:
      tokens: int32 [B,T] ids.
      segment_ids: int32 [B,T]; 0 = padding; states restart wherever it
        changes. None -> (tokens != pad_id).
      deterministic: False enables the dropouts (needs a "dropout" rng).
      return_logits: False skips the softmax (features only).
      logits_at: [B,K] int32 positions: logits there only ([B,K,V]).
      **unused: keywords of the other decoders (positions, ...), ignored.

    Returns:
      "logits" [B,T,V] (t predicts t+1), "hidden" [B,T,E] the last LSTM's
      output, "dropped" [B,T,E] it after output dropout (the softmax's
      input), "layers" (the token layer and the last LSTM's output, the
      two E-wide states a scalar mix stacks).
    """
    del unused
    cfg = self.config
    if cfg.scan_layers:
      raise ValueError("awd_lstm: scan_layers is not supported (its last "
                       "layer is narrower); set it False")
    segment_ids = lstm_lib.segments_of(tokens, segment_ids, cfg.pad_id)
    table = lstm_lib.word_table(self, cfg.vocab_size, cfg.embed_dim)
    x = self._embed(table, tokens, deterministic)
    h = _locked(self, x, cfg.input_dropout, deterministic)
    for i in range(cfg.num_layers):
      last = i == cfg.num_layers - 1
      h = lstm_lib.LSTM(cfg.embed_dim if last else cfg.hidden_dim,
                        weight_drop=cfg.weight_drop, dtype=cfg.dtype,
                        name=f"lstm_{i}")(h, segment_ids, deterministic)
      h = nn.with_logical_constraint(h, ACTIVATION_AXES)
      if not last:
        h = _locked(self, h, cfg.hidden_dropout, deterministic)
    dropped = _locked(self, h, cfg.dropout_rate, deterministic)
    out = {"hidden": h, "dropped": dropped, "layers": (x, h)}
    if return_logits:
      at = dropped if logits_at is None else jnp.take_along_axis(
          dropped, logits_at[..., None], axis=1)
      out["logits"] = self._softmax(table, at)
    return out

  def _embed(self, table, tokens, deterministic):
    """Token vectors [B,T,E], whole rows dropped at `embed_dropout`."""
    cfg = self.config
    x = jnp.take(table, tokens, axis=0)
    if deterministic or cfg.embed_dropout == 0.0:
      return x
    rows = jnp.ones((cfg.vocab_size,), x.dtype)
    rows = dropout.drop(self.make_rng("dropout"), rows, cfg.embed_dropout,
                        rows.shape)
    return x * jnp.take(rows, tokens, axis=0)[..., None]

  def _softmax(self, table, h):
    """[B,T,E] -> logits [B,T,V], tied to the table unless configured."""
    cfg = self.config
    if cfg.tie_embeddings:
      w, eq = table, "bte,ve->btv"
    else:
      w = lstm_lib.param(self, "softmax_kernel",
                         nn.initializers.lecun_normal(),
                         (cfg.embed_dim, cfg.vocab_size), ("embed", "vocab"))
      eq = "bte,ev->btv"
    bias = lstm_lib.param(self, "softmax_bias", nn.initializers.zeros,
                          (cfg.vocab_size,), ("vocab",))
    return lstm_lib.dot(eq, h, w, cfg.dtype) + bias
