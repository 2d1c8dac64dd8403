"""Hugging Face GPT-2 checkpoints -> `zoo.models.gpt2`."""

from typing import Any

import numpy as np

from zoo.convert import bert as bert_convert
from zoo.convert import common
from zoo.models import gpt2

ARCHITECTURES = ("GPT2Model", "GPT2LMHeadModel")
MODEL_TYPES = ("gpt2",)


def make_config(hf: dict[str, Any]) -> gpt2.Config:
  """The zoo Config of a Hugging Face GPT-2 config dict."""
  d = hf["n_embd"]
  if not hf.get("scale_attn_weights", True) or hf.get(
      "scale_attn_by_inverse_layer_idx") or hf.get("reorder_and_upcast_attn"):
    raise ValueError("GPT-2 attention-scaling variants are not supported")
  pad = hf.get("pad_token_id")
  return gpt2.Config(
      vocab_size=hf["vocab_size"], pad_id=-1 if pad is None else pad,
      dropout_rate=hf.get("resid_pdrop", 0.1),
      attention_dropout_rate=hf.get("attn_pdrop", 0.1),
      num_layers=hf["n_layer"], embed_dim=d, num_heads=hf["n_head"],
      mlp_dim=hf.get("n_inner") or 4 * d, max_len=hf["n_positions"],
      activation=bert_convert.activation(
          hf.get("activation_function", "gelu_new")),
      norm_eps=hf.get("layer_norm_epsilon", 1e-5))


def block(r: common.Reader, p: str, heads: int) -> dict[str, Any]:
  """One pre-LN Block subtree from `h.<i>.` (Conv1D weights are [in, out])."""
  attn = common.split_fused_qkv(r, p + "attn.c_attn", heads)
  d = attn["query"]["kernel"].shape[0]
  attn["out"] = r.linear(p + "attn.c_proj", (heads, d // heads), (d,),
                         torch_linear=False)
  return {
      "attention_norm": r.norm(p + "ln_1"),
      "attention": attn,
      "mlp_norm": r.norm(p + "ln_2"),
      "mlp": {"wi": r.linear(p + "mlp.c_fc", torch_linear=False),
              "wo": r.linear(p + "mlp.c_proj", torch_linear=False)},
  }


def convert(hf: dict[str, Any], tensors: dict[str, np.ndarray]):
  """`("gpt2", Config, params)` of a GPT-2 checkpoint."""
  config = make_config(hf)
  top = common.Reader(tensors)
  r = top.with_prefix(common.base_prefix(tensors, ("transformer.",),
                                         "wte.weight"))
  n = common.num_layers(r, "h.{}.")
  params = {
      "token": r.embed("wte"), "position": r.embed("wpe"),
      "decoder": {f"layer_{i}": block(r, f"h.{i}.", config.num_heads)
                  for i in range(n)},
      "final_norm": r.norm("ln_f"),
  }
  if top.has("lm_head.weight"):
    top.get("lm_head.weight")  # tied to wte; the model reuses the table
  common.warn_unused(top, "gpt2")
  return "gpt2", config, params


# Export (`zoo.convert.export`): the Hugging Face side of a zoo config.
FAMILIES = ("gpt2",)


def hf_config(family: str, config: gpt2.Config) -> dict[str, Any]:
  """The Hugging Face config dict `make_config` reads back as `config`."""
  del family
  return dict(
      model_type="gpt2", vocab_size=config.vocab_size,
      n_embd=config.embed_dim, n_layer=config.num_layers,
      n_head=config.num_heads, n_inner=config.mlp_dim,
      n_positions=config.max_len,
      activation_function=common.hf_name(bert_convert.ACTIVATIONS,
                                         config.activation, "activation"),
      resid_pdrop=config.dropout_rate, embd_pdrop=config.dropout_rate,
      attn_pdrop=config.attention_dropout_rate,
      layer_norm_epsilon=config.norm_eps,
      pad_token_id=None if config.pad_id < 0 else config.pad_id)


def architecture(family: str, config: gpt2.Config, params) -> str:
  """GPT-2 always goes out with its (tied) LM head."""
  del family, config, params
  return "GPT2LMHeadModel"
