"""CoVe (McCann et al. 2017): context vectors from a translation encoder.

The MT-LSTM: a word table (the paper's GloVe vectors; here the model's own
table, trained with it) and two stacked BiLSTMs, the second reading the
first's states. Pre-trained by attentional translation
(`objectives/cove.py`): a two-layer LSTM decoder over the target
sentence's pieces (teacher-forced), global attention over the encoder's
states of its own source sentence, h~ = tanh(W [h; context]), and a
softmax over the pieces. The attention reads the decoder's state after its
LSTM (Luong's global attention without input feeding), so the decoder's
recurrence does not wait on the attention at every step.

As a backbone (probes, fine-tuning, `zoo.load`), the model is the encoder
and its output is CoVe's feature: `hidden` = [table vector; top BiLSTM
state] per piece ([B,T,E+2H]), `layers` that one feature.

Letters: B batch, T length, E embed, H units per direction, D decoder
units, V vocab.
"""

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from zoo.models import dense
from zoo.models import lstm as lstm_lib

INTERFACE = "encoder"
NO_SENTENCE_SCORE = ("CoVe's encoder gives no probability to a sentence "
                     "(its decoder scores a translation, not the sentence)")


@dataclasses.dataclass(frozen=True)
class Config:
  """CoVe hyper-parameters (the paper's MT-LSTM at small)."""
  vocab_size: int = 8000  # V: one piece vocabulary for both languages
  pad_id: int = 0  # padding token id; also the decoder's start token
  dtype: str = "float32"  # compute dtype of matmuls; params stay float32
  embed_dim: int = 300  # E: the word vectors (GloVe's width)
  hidden_dim: int = 300  # H: units per direction of each BiLSTM
  num_layers: int = 2  # stacked BiLSTMs
  decoder_dim: int = 600  # D: the decoder LSTMs' units
  scan_layers: bool = False  # the layers differ in input width


SIZES = {
    "tiny": dict(vocab_size=512, embed_dim=32, hidden_dim=32,
                 decoder_dim=64),
    "small": dict(),
}


class Model(nn.Module):
  """The MT-LSTM encoder, and with `decoder_inputs` the attentional decoder."""
  config: Config

  @nn.compact
  def __call__(self, tokens, *, segment_ids=None, deterministic: bool = True,
               return_logits: bool = True, decoder_inputs=None,
               attend=None, **unused) -> dict[str, Any]:
    """Encodes; with `decoder_inputs` and `attend`, also translates.

    Args:
      tokens: int32 [B,T] ids.
      segment_ids: int32 [B,T]; recurrences restart wherever it changes
        (0 = padding). None -> (tokens != pad_id).
      deterministic: unused (no dropout in this implementation).
      return_logits: with `decoder_inputs`, run the decoder.
      decoder_inputs: int32 [B,T] the decoder's input pieces (the target
        moved right within its sentence), or None: encoder only.
      attend: bool [B,T,T]: query position t may read encoder state s.
      **unused: keywords of the other families, ignored.

    Returns:
      "hidden" [B,T,E+2H] CoVe features, "layers" [hidden]; with the
      decoder, "logits" [B,T,V]: at each position, the decoder's
      prediction of the piece there.
    """
    del unused, deterministic
    cfg = self.config
    segment_ids = lstm_lib.segments_of(tokens, segment_ids, cfg.pad_id)
    table = lstm_lib.word_table(self, cfg.vocab_size, cfg.embed_dim)
    vectors = states = jnp.take(table, tokens, axis=0)
    for i in range(cfg.num_layers):
      states = lstm_lib.BiLSTM(cfg.hidden_dim, cfg.dtype,
                               name=f"bilstm_{i}")(states, segment_ids)
    features = jnp.concatenate([vectors, states], axis=-1)
    out = {"hidden": features, "layers": [features]}
    if decoder_inputs is None or not return_logits:
      return out
    h = jnp.take(table, decoder_inputs, axis=0)
    for i in range(2):
      h = lstm_lib.LSTM(cfg.decoder_dim, dtype=cfg.dtype,
                        name=f"decoder_{i}")(h, segment_ids)
    keys = dense.Dense(cfg.decoder_dim, ("embed", "mlp"), use_bias=False,
                       dtype=cfg.dtype, name="attention")(states)
    scores = jnp.einsum("btd,bsd->bts", h, keys)
    scores = jnp.where(attend, scores, -1e9)
    weights = jax.nn.softmax(scores, axis=-1) * jnp.any(
        attend, axis=-1, keepdims=True)
    context = jnp.einsum("bts,bsd->btd", weights, states)
    mixed = jnp.tanh(dense.Dense(cfg.decoder_dim, ("embed", "mlp"),
                                 dtype=cfg.dtype, name="combine")(
                                     jnp.concatenate([h, context], -1)))
    out["logits"] = dense.Dense(cfg.vocab_size, ("embed", "vocab"),
                                dtype=cfg.dtype, name="vocab")(mixed)
    return out
