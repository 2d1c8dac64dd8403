"""Hugging Face BART checkpoints -> `zoo.models.bart`."""

from typing import Any

import numpy as np

from zoo.convert import common
from zoo.models import bart

ARCHITECTURES = ("BartForConditionalGeneration", "BartModel")
MODEL_TYPES = ("bart",)

# Hugging Face activation names -> zoo.models.layers names.
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh",
               "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu",
               "silu": "silu", "swish": "silu"}


def _same(hf: dict[str, Any], a: str, b: str):
  """hf[a], refusing a checkpoint whose encoder and decoder differ in it."""
  if b in hf and hf[b] != hf[a]:
    raise ValueError(f"BART with {a}={hf[a]} != {b}={hf[b]} is not supported;"
                     " the zoo's BART uses one value for both stacks")
  return hf[a]


def make_config(hf: dict[str, Any]) -> bart.Config:
  """The zoo Config of a Hugging Face BART config dict."""
  for flag in ("add_final_layer_norm", "normalize_before"):
    if hf.get(flag):
      raise ValueError(f"BART config with {flag}=True (mBART style) is not "
                       "supported; the zoo's BART is post-LN")
  act = hf.get("activation_function", "gelu")
  if act not in ACTIVATIONS:
    raise ValueError(f"unsupported activation_function {act!r}; supported: "
                     f"{sorted(ACTIVATIONS)}")
  return bart.Config(
      vocab_size=hf["vocab_size"], pad_id=hf.get("pad_token_id", 1),
      decoder_start_id=hf.get("decoder_start_token_id", 2),
      dropout_rate=hf.get("dropout", 0.1),
      attention_dropout_rate=hf.get("attention_dropout", 0.0),
      mlp_dropout_rate=hf.get("activation_dropout", 0.0),
      num_layers=hf["encoder_layers"],
      num_decoder_layers=hf.get("decoder_layers", hf["encoder_layers"]),
      embed_dim=hf["d_model"],
      num_heads=_same(hf, "encoder_attention_heads", "decoder_attention_heads"),
      mlp_dim=_same(hf, "encoder_ffn_dim", "decoder_ffn_dim"),
      max_len=hf["max_position_embeddings"], activation=ACTIVATIONS[act],
      scale_embedding=bool(hf.get("scale_embedding", False)))


def layer(r: common.Reader, p: str, heads: int, decoder: bool
          ) -> dict[str, Any]:
  """One post-LN Block subtree from `p` (a `layers.<i>.` prefix)."""
  def attn(name):
    q = p + name + "."
    return common.attention(r, q + "q_proj", q + "k_proj", q + "v_proj",
                            q + "out_proj", heads)

  out = {"attention": attn("self_attn"),
         "attention_norm": r.norm(p + "self_attn_layer_norm")}
  if decoder:
    out["cross_attention"] = attn("encoder_attn")
    out["cross_attention_norm"] = r.norm(p + "encoder_attn_layer_norm")
  out["mlp"] = {"wi": r.linear(p + "fc1"), "wo": r.linear(p + "fc2")}
  out["mlp_norm"] = r.norm(p + "final_layer_norm")
  return out


def stack(r: common.Reader, name: str, heads: int) -> dict[str, Any]:
  """The `bart.Stack` subtree of "encoder" or "decoder"."""
  n = common.num_layers(r, name + ".layers.{}.")
  if n == 0:
    raise KeyError(f"checkpoint has no {name}.layers.0.* tensors")
  decoder = name == "decoder"
  return {"position": r.embed(name + ".embed_positions"),
          "embed_norm": r.norm(name + ".layernorm_embedding"),
          "stack": {f"layer_{i}": layer(r, f"{name}.layers.{i}.", heads,
                                        decoder) for i in range(n)}}


def convert(hf: dict[str, Any], tensors: dict[str, np.ndarray]):
  """`(family, Config, params)` of a BART checkpoint."""
  config = make_config(hf)
  top = common.Reader(tensors)
  r = top.with_prefix(common.base_prefix(tensors, ("model.",),
                                         "shared.weight"))
  shared = r.get("shared.weight")
  for alias in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight"):
    _mark_tied(r, alias, shared)
  _mark_tied(top, "lm_head.weight", shared)
  params = {"token_embed": {"embedding": shared},
            "encoder": stack(r, "encoder", config.num_heads),
            "decoder": stack(r, "decoder", config.num_heads)}
  if top.has("final_logits_bias"):
    params["final_logits_bias"] = top.get("final_logits_bias").reshape(-1)
  else:
    params["final_logits_bias"] = np.zeros(config.vocab_size, np.float32)
  common.warn_unused(top, "bart")
  return "bart", config, params


def _mark_tied(r: common.Reader, name: str, shared: np.ndarray) -> None:
  """Accepts a stored copy of the token table; refuses a different one."""
  if not r.has(name):
    return
  if not np.array_equal(r.get(name), shared):
    raise ValueError(f"BART checkpoint's {r.prefix}{name} differs from the "
                     "shared token table; the zoo's BART ties them")


# Export (`zoo.convert.export`): the Hugging Face side of a zoo config.
FAMILIES = ("bart",)


def hf_config(family: str, config: bart.Config) -> dict[str, Any]:
  """The Hugging Face config dict `make_config` reads back as `config`."""
  del family
  heads, ffn = config.num_heads, config.mlp_dim
  return dict(
      model_type="bart", vocab_size=config.vocab_size,
      d_model=config.embed_dim, encoder_layers=config.num_layers,
      decoder_layers=config.num_decoder_layers or config.num_layers,
      encoder_attention_heads=heads, decoder_attention_heads=heads,
      encoder_ffn_dim=ffn, decoder_ffn_dim=ffn,
      max_position_embeddings=config.max_len,
      activation_function=common.hf_name(ACTIVATIONS, config.activation,
                                         "activation"),
      dropout=config.dropout_rate,
      attention_dropout=config.attention_dropout_rate,
      activation_dropout=config.mlp_dropout_rate,
      scale_embedding=config.scale_embedding, pad_token_id=config.pad_id,
      decoder_start_token_id=config.decoder_start_id,
      forced_eos_token_id=None, normalize_before=False,
      add_final_layer_norm=False)


def architecture(family: str, config: bart.Config, params) -> str:
  """BART goes out whole, with its tied LM head and logits bias."""
  del family, config, params
  return "BartForConditionalGeneration"
