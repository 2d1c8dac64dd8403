"""The reference side of `train_step.py`: transformers' PyTorch models.

Each reference is built from the zoo model's own Config (same sizes,
vocabulary, activation, dropout), with random weights, and trained with
`torch.optim.AdamW` and global-norm clipping at 1.0, as the zoo's trainer.
"""

import os
from typing import Any, Callable

import numpy as np
import torch
import transformers

_ACTS = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu",
         "gated_gelu_tanh": "gated-gelu", "gated_relu": "gated-relu"}


def versions() -> dict[str, str]:
  """Versions of the reference stack."""
  return {"torch": torch.__version__, "transformers": transformers.__version__,
          "torch_threads": torch.get_num_threads()}


def _act(name: str) -> str:
  if name not in _ACTS:
    raise ValueError(f"no transformers activation for the zoo's {name!r}")
  return _ACTS[name]


def bert(c) -> torch.nn.Module:
  """BertForMaskedLM of the zoo BERT Config `c`."""
  return transformers.BertForMaskedLM(transformers.BertConfig(
      vocab_size=c.vocab_size, hidden_size=c.embed_dim,
      num_hidden_layers=c.num_layers, num_attention_heads=c.num_heads,
      intermediate_size=c.mlp_dim, max_position_embeddings=c.max_len,
      type_vocab_size=c.type_vocab_size, hidden_act=_act(c.activation),
      layer_norm_eps=c.norm_eps, hidden_dropout_prob=c.dropout_rate,
      attention_probs_dropout_prob=c.attention_dropout_rate))


def gpt2(c) -> torch.nn.Module:
  """GPT2LMHeadModel of the zoo GPT-2 Config `c`."""
  return transformers.GPT2LMHeadModel(transformers.GPT2Config(
      vocab_size=c.vocab_size, n_positions=c.max_len, n_embd=c.embed_dim,
      n_layer=c.num_layers, n_head=c.num_heads, n_inner=c.mlp_dim,
      activation_function=_act(c.activation), layer_norm_epsilon=c.norm_eps,
      resid_pdrop=c.dropout_rate, embd_pdrop=c.dropout_rate,
      attn_pdrop=c.attention_dropout_rate, bos_token_id=c.vocab_size - 1,
      eos_token_id=c.vocab_size - 1))


def t5(c) -> torch.nn.Module:
  """T5ForConditionalGeneration of the zoo T5 Config `c`."""
  return transformers.T5ForConditionalGeneration(transformers.T5Config(
      vocab_size=c.vocab_size, d_model=c.embed_dim, d_kv=c.head_dim,
      d_ff=c.mlp_dim, num_layers=c.num_layers,
      num_decoder_layers=c.num_decoder_layers or c.num_layers,
      num_heads=c.num_heads, relative_attention_num_buckets=c.relpos_buckets,
      relative_attention_max_distance=c.relpos_max_distance,
      dropout_rate=c.dropout_rate, layer_norm_epsilon=c.norm_eps,
      feed_forward_proj=_act(c.activation),
      tie_word_embeddings=c.tie_embeddings, pad_token_id=c.pad_id,
      decoder_start_token_id=c.pad_id))


def inputs_for(family: str, shapes: dict[str, Any]) -> dict[str, Any]:
  """Random model inputs with labels, as the zoo objective's shapes."""
  b, t, v = shapes["batch"], shapes["seq_len"], shapes["config"].vocab_size
  gen = torch.Generator().manual_seed(0)
  ids = torch.randint(7, v - 100, (b, t), generator=gen)
  if family == "bert":
    labels = torch.where(torch.rand(b, t, generator=gen) < 0.15, ids, -100)
    return {"input_ids": ids, "labels": labels}
  if family == "gpt2":
    return {"input_ids": ids, "labels": ids}
  labels = torch.randint(7, v - 100, (b, shapes["dec_len"]), generator=gen)
  return {"input_ids": ids, "labels": labels}


def family_of(config) -> str:
  """"bert", "gpt2" or "t5" from the zoo Config's module."""
  family = type(config).__module__.rsplit(".", 1)[-1]
  if family not in ("bert", "gpt2", "t5"):
    raise ValueError(f"no transformers reference for family {family!r}")
  return family


def prepare_step(mode: str, shapes: dict[str, Any]) -> Callable[[], None]:
  """One training step of the reference model, ready to time.

  Args:
    mode: "float32", or "bfloat16" for `torch.autocast("cpu", bfloat16)`.
    shapes: from `_zoo.shapes_of`: the zoo Config, batch, lengths.

  Returns:
    `step_fn()`: forward, backward, clipping and AdamW on a fixed batch;
    raises FloatingPointError on a non-finite loss.
  """
  torch.set_num_threads(len(os.sched_getaffinity(0)))
  torch.manual_seed(0)
  family = family_of(shapes["config"])
  model = {"bert": bert, "gpt2": gpt2, "t5": t5}[family](shapes["config"])
  model.train()
  opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
  inputs = inputs_for(family, shapes)
  autocast = mode == "bfloat16"

  def one():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
      loss = model(**inputs).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    if not np.isfinite(loss.item()):
      raise FloatingPointError(f"reference loss is {loss.item()}")

  return one
