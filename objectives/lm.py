"""Language-model schemes: `clm` (GPT), `prefix_lm` (T5), `bilm` (ELMo),
`awd_lm` (AWD-LSTM, ULMFiT's pre-training).

Packed rows keep their documents apart: the models attend within equal
`segment_ids` (the batch's `doc_ids`), positions restart at each document,
and no position predicts across an EOS boundary.

`clm` with `memory=True` (a Transformer-XL with mem_len > 0) also reads
the states of the tokens its row's stream held before (`objectives.memory`,
carried by the trainer from step to step).
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from objectives import common
from objectives import memory as memory_lib
from objectives import register
from objectives import segments
from objectives import transforms
from zoo.models import masks

# Positions per pass through the LM head where a config turns on option
# `head_chunk` of `clm` or `grover` (`configs/gpt2_clm.py`, the demo grid):
# `bench/head_loss.py` times the step at 8, 16 and 32 against the whole
# logits (0) on CPU, on the demo's tiny GPT-2 and at GPT-2 small. The
# schemes default to 0: a TPU plan (`zoo.plan`) counts a loop's HBM traffic
# once, and the chunked head is not measured on accelerators.
HEAD_CHUNK = 16


def doc_inputs(batch):
  """Model keywords of an uncorrupted packed row: segments and positions."""
  return {"segment_ids": batch["doc_ids"],
          "positions": transforms.positions_from_segments(batch["doc_ids"])}


@register
class CausalLM(common.Scheme):
  """Next-token prediction. Encoder families run with a causal mask.

  Options: `memory` carries a Transformer-XL's segment memory across train
  steps (`init_carry`, `loss_carry`); `reset_memory_at_documents` lets a
  query read only its own document's memory; `head_chunk` > 0 positions
  go through the LM head at a time, with the loss's gradient formed chunk
  by chunk (`objectives.head_loss`, families with `lm_logits`; the same
  loss to float rounding), 0 = the whole [B, T, V] logits at once.
  """
  name = "clm"
  interfaces = ("decoder", "encoder")
  defaults = {"memory": False, "reset_memory_at_documents": True,
              "head_chunk": 0}
  model_overrides = {"nsp_head": False}

  def setup(self):
    if self.options["memory"]:
      memory_lib.check(self.family, self.config)

  def init_carry(self, batch_size, seq_len):
    """The empty memory (`memory=True`), else None."""
    if not self.options["memory"]:
      return None
    return memory_lib.zeros(self.config, batch_size)

  def loss_carry(self, params, batch, rng, carry, deterministic=False):
    """`loss` reading the memory `carry`; also returns the next memory."""
    params = nn.meta.unbox(params)
    _, k_drop, k_score = jax.random.split(rng, 3)  # as `loss` splits them
    inputs = common.as_batch(batch)
    args, kw = self.model_inputs(inputs)
    kw["mems"] = list(carry["mems"])
    kw["mem_mask"] = memory_lib.visible(
        carry, inputs["doc_ids"], self.options["reset_memory_at_documents"])
    outputs = self.apply(params, *args, rng=k_drop,
                         deterministic=deterministic, **kw)
    parts = self.score(params, inputs, outputs, k_score, deterministic)
    loss, metrics = common.combine(parts, self.part_weights)
    return loss, metrics, memory_lib.advance(
        carry, outputs["new_mems"], inputs["tokens"], inputs["doc_ids"],
        self.specials.eos)

  def corrupt(self, batch, rng):
    return batch

  def model_inputs(self, inputs):
    return (inputs["tokens"],), lm_inputs(self, inputs)

  def score(self, params, inputs, outputs, rng, deterministic):
    return next_token_parts(self, params, inputs, outputs)


def lm_inputs(scheme, inputs):
  """Model keywords of a next-token scheme on an uncorrupted row: documents,
  a causal mask on an encoder, no logits where `scheme.fuses_head`."""
  kw = doc_inputs(inputs)
  if scheme.interface == "encoder":
    kw["mask"] = masks.causal_mask(inputs["tokens"].shape[1])
  if scheme.fuses_head:
    kw["return_logits"] = False
  return kw


def next_token_parts(scheme, params, inputs, outputs):
  """{"lm": sums} of each position predicting the next token of its own
  document (`doc_ids`), through `scheme.head_sums`."""
  targets, weights = common.next_token_targets(inputs["tokens"],
                                               inputs["doc_ids"])
  return {"lm": scheme.head_sums(params, outputs, targets, weights)}


@register
class PrefixLM(common.Scheme):
  """T5's prefix LM on one stack: each document split at a random point;
  the suffix is predicted from the prefix.

  The model runs the whole row with the prefix-LM mask
  (`masks.prefix_lm_mask`: bidirectional within each document's prefix,
  causal after it; T5 section 3.2.1); the loss covers the suffix only. On
  an encoder-decoder the same split is `t5_prefix_lm` (`objectives.t5`).
  """
  name = "prefix_lm"
  interfaces = ("encoder", "decoder")
  model_overrides = {"nsp_head": False}

  def corrupt(self, batch, rng):
    return dict(batch, prefix=segments.prefix_split(rng, batch,
                                                    self.specials))

  def model_inputs(self, inputs):
    kw = doc_inputs(inputs)
    if self.interface == "decoder":
      kw["prefix"] = inputs["prefix"]  # replaces the decoder's causal mask
    else:
      kw["mask"] = masks.prefix_lm_mask(inputs["prefix"])
    return (inputs["tokens"],), kw

  def score(self, params, inputs, outputs, rng, deterministic):
    targets, weights = common.next_token_targets(inputs["tokens"],
                                                 inputs["doc_ids"])
    nxt_prefix = jnp.concatenate(
        [inputs["prefix"][:, 1:], jnp.ones_like(inputs["prefix"][:, :1])], 1)
    weights &= ~nxt_prefix
    return {"lm": common.token_sums(outputs["logits"], targets, weights)}


@register
class BiLM(common.Scheme):
  """ELMo: a forward and a backward LM, averaged.

  A character-CNN ELMo (`char_cnn=True`) reads each piece's characters:
  `char_table` [V, K] int32 (`zoo.models.elmo.char_table` of the
  tokenizer's pieces, which `zoo.train` builds) gives them, looked up
  inside jit.
  """
  name = "bilm"
  interfaces = ("lstm",)
  defaults = {"char_table": None}
  part_weights = {"lm": 0.0, "forward": 0.5, "backward": 0.5}

  def setup(self):
    table = self.options["char_table"]
    if not getattr(self.config, "char_cnn", False):
      self.char_table = None
      return
    if table is None:
      raise ValueError("a char-CNN ELMo reads character ids: build bilm "
                       "with char_table=elmo.char_table(tokenizer.pieces(), "
                       "max_chars), as zoo.train does")
    table = jnp.asarray(table, jnp.int32)
    want = (self.config.vocab_size, self.config.max_chars)
    if table.ndim != 2 or table.shape[0] < want[0] or table.shape[1] != want[1]:
      raise ValueError(f"char_table {table.shape} does not cover the "
                       f"vocabulary x max_chars {want}")
    self.char_table = table

  def corrupt(self, batch, rng):
    return batch

  def model_inputs(self, inputs):
    kw = {"segment_ids": inputs["doc_ids"]}
    if self.char_table is not None:
      kw["chars"] = jnp.take(self.char_table, inputs["tokens"], axis=0)
    return (inputs["tokens"],), kw

  def score(self, params, inputs, outputs, rng, deterministic):
    tok, doc = inputs["tokens"], inputs["doc_ids"]
    fwd_t, fwd_w = common.next_token_targets(tok, doc)
    bwd_t, bwd_w = common.next_token_targets(tok[:, ::-1], doc[:, ::-1])
    fwd = common.token_sums(outputs["forward_logits"], fwd_t, fwd_w)
    bwd = common.token_sums(outputs["backward_logits"], bwd_t[:, ::-1],
                            bwd_w[:, ::-1])
    both = {k: fwd[k] + bwd[k] for k in fwd}
    return {"lm": both, "forward": fwd, "backward": bwd}


def activation_sums(x, weights):
  """Sums of squares of x [B,T,D] over positions weights [B,T] (bool),
  as `common.token_sums` counts: the mean is over every element."""
  w = weights.astype(jnp.float32)
  return {"loss_sum": (jnp.square(x).sum(-1) * w).sum(),
          "weight_sum": w.sum() * x.shape[-1]}


@register
class AWDLM(common.Scheme):
  """AWD-LSTM's language model (ULMFiT's pre-training): next-token
  prediction plus the paper's activation penalties on the last layer,
  AR, `ar` * mean(dropped output^2), and TAR, `tar` * mean((h_t -
  h_{t-1})^2) over consecutive positions of one document (the output
  before dropout); Merity et al. 2018 use 2 and 1."""
  name = "awd_lm"
  interfaces = ("decoder",)
  defaults = {"ar": 2.0, "tar": 1.0}

  def setup(self):
    self.part_weights = {"lm": 1.0, "ar": self.options["ar"],
                         "tar": self.options["tar"]}
    if self.family != "awd_lstm":
      raise ValueError(f"objective 'awd_lm' reads an AWD-LSTM's outputs; "
                       f"{self.family!r} has none (use clm)")

  def corrupt(self, batch, rng):
    return batch

  def model_inputs(self, inputs):
    return (inputs["tokens"],), doc_inputs(inputs)

  def score(self, params, inputs, outputs, rng, deterministic):
    tok, doc = inputs["tokens"], inputs["doc_ids"]
    targets, weights = common.next_token_targets(tok, doc)
    h = outputs["hidden"]
    step = (doc[:, 1:] == doc[:, :-1]) & (doc[:, 1:] > 0)
    return {"lm": common.token_sums(outputs["logits"], targets, weights),
            "ar": activation_sums(outputs["dropped"], doc > 0),
            "tar": activation_sums(h[:, 1:] - h[:, :-1], step)}
