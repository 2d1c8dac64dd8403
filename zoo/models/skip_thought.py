"""Skip-Thought (Kiros et al. 2015): a GRU sentence encoder and two GRU
decoders that generate the previous and the next sentence from it.

One word table E serves the encoder and both decoders; one output matrix
(the paper's vocabulary matrix V) serves both decoders. A sentence's
vector is the encoder's state at its last token (the encoder restarts at
every sentence, so the vector reads that sentence only). The decoder
"next" generates sentence s from the vector of sentence s - 1, the decoder
"previous" generates sentence s from the vector of sentence s + 1; both
read the pieces of sentence s before the one they predict (teacher
forcing, restarting at each sentence: the caller's `decoder_inputs`) and the vector through their gates'
conditioning matrices (`lstm.GRU`). `neighbour_vectors` is the one
definition of which vector conditions which sentence.

As an encoder (fine-tuning, probes, `zoo.load`), the model is the encoder
alone: `hidden` is its states, `layers` that one layer. Those callers read
a text sentence by sentence, as pre-training does (`READS_SENTENCES`: the
text is split and encoded by `data.annotate`, and the sentence numbers
are the segment ids), so each sentence's states restart; with
`sentence_reading=False` they read a text as one sequence. With no segment
ids the whole row is one sentence.

Letters: B batch, T length, E embed, H units, V vocab.
"""

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from zoo.models import dense
from zoo.models import lstm as lstm_lib

INTERFACE = "encoder"
READS_SENTENCES = True  # callers pass sentence numbers as segment_ids
DECODERS = ("next", "previous")  # the decoder of each neighbour
OFFSETS = {"next": -1, "previous": 1}  # sentence s reads the vector of s + o
# Sentence vectors: an encoder, not a sentence scorer (minimal pairs).
NO_SENTENCE_SCORE = ("Skip-Thought scores a sentence only given its "
                     "neighbour's vector, not on its own")


@dataclasses.dataclass(frozen=True)
class Config:
  """Skip-Thought hyper-parameters (the paper's uni-skip model at small)."""
  vocab_size: int = 20000  # V
  pad_id: int = 0  # padding token id; also the decoders' start token
  dtype: str = "float32"  # compute dtype of matmuls; params stay float32
  embed_dim: int = 620  # E: word vectors
  hidden_dim: int = 2400  # H: encoder and decoder units
  scan_layers: bool = False  # one recurrent layer: nothing to scan
  # Probes, fine-tuning and zoo.load read a text sentence by sentence
  # (READS_SENTENCES); False: the whole text as one sequence.
  sentence_reading: bool = True


SIZES = {
    "tiny": dict(vocab_size=512, embed_dim=32, hidden_dim=64),
    "small": dict(),
}


def sentence_ends(segment_ids: jax.Array) -> jax.Array:
  """bool [B,T]: the last position of each sentence (not padding)."""
  nxt = jnp.concatenate([segment_ids[:, 1:],
                         jnp.zeros_like(segment_ids[:, :1])], axis=1)
  return (segment_ids > 0) & (nxt != segment_ids)


def neighbour_vectors(hidden: jax.Array, segment_ids: jax.Array,
                      offset: int) -> tuple[jax.Array, jax.Array]:
  """Each position's conditioning: the vector of sentence s + offset.

  Args:
    hidden: [B,T,H] encoder states (restarted at each sentence).
    segment_ids: [B,T] int32 sentence numbers 1, 2, ... in row order, 0 on
      padding.
    offset: -1 (the sentence before) or +1 (the one after).

  Returns:
    ([B,T,H] vectors, [B,T] bool: that sentence is in the row). Where it
    is not, the vector is zeros.
  """
  t = segment_ids.shape[1]
  ends = sentence_ends(segment_ids)
  # Slot s holds sentence s's last state: at most T sentences per row.
  slot = jnp.where(ends, segment_ids, 0)

  def row(h, slots):
    return jax.ops.segment_sum(h, slots, num_segments=t + 2)
  vectors = jax.vmap(row)(hidden, slot)  # [B, T+2, H]; slot 0 unused
  have = jax.vmap(lambda s: jax.ops.segment_sum(
      jnp.ones_like(s), s, num_segments=t + 2))(slot) > 0
  have = have.at[:, 0].set(False)
  want = jnp.where(segment_ids > 0, segment_ids + offset, 0).clip(0, t + 1)
  got = jnp.take_along_axis(vectors, want[..., None], axis=1)
  ok = jnp.take_along_axis(have, want, axis=1) & (segment_ids > 0)
  return jnp.where(ok[..., None], got, 0.0), ok


class Model(nn.Module):
  """The encoder, and with `decoder_inputs` both decoders."""
  config: Config

  @nn.compact
  def __call__(self, tokens, *, segment_ids=None, deterministic: bool = True,
               return_logits: bool = True, decoder_inputs=None,
               **unused) -> dict[str, Any]:
    """Encodes each sentence; with `decoder_inputs`, generates its neighbours.

    Args:
      tokens: int32 [B,T] ids.
      segment_ids: int32 [B,T] sentence numbers 1, 2, ... (0 = padding);
        None -> (tokens != pad_id): each row one sentence.
      deterministic: unused (no dropout: the paper trains without).
      return_logits: with `decoder_inputs`, run both decoders.
      decoder_inputs: int32 [B,T] the decoders' input pieces: each
        sentence's pieces moved right by one within the sentence, a start
        id first (teacher forcing; `objectives.common.shift_right`).
      **unused: keywords of the other families (positions, ...), ignored.

    Returns:
      "hidden" [B,T,H], "layers" [hidden]; with `decoder_inputs`,
      "logits_next" and "logits_previous" [B,T,V]: at a position of
      sentence s, that decoder's prediction of the piece there, and
      "has_next" / "has_previous" [B,T] bool: the conditioning sentence is
      in the row.
    """
    del unused, deterministic
    cfg = self.config
    segment_ids = lstm_lib.segments_of(tokens, segment_ids, cfg.pad_id)
    table = lstm_lib.word_table(self, cfg.vocab_size, cfg.embed_dim)
    hidden = lstm_lib.GRU(cfg.hidden_dim, cfg.dtype, name="encoder")(
        jnp.take(table, tokens, axis=0), segment_ids)
    out = {"hidden": hidden, "layers": [hidden]}
    if decoder_inputs is None or not return_logits:
      return out
    words = jnp.take(table, decoder_inputs, axis=0)
    vocab = dense.Dense(cfg.vocab_size, ("embed", "vocab"), dtype=cfg.dtype,
                        name="vocab")
    for name in DECODERS:
      cond, ok = neighbour_vectors(hidden, segment_ids, OFFSETS[name])
      states = lstm_lib.GRU(cfg.hidden_dim, cfg.dtype, name=f"decoder_{name}")(
          words, segment_ids, cond)
      out[f"logits_{name}"] = vocab(states)
      out[f"has_{name}"] = ok
    return out
