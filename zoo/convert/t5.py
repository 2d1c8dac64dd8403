"""Hugging Face T5 (original and v1.1) and mT5 checkpoints -> `zoo.models.t5`.

The head convention is read from the checkpoint itself: a stored
`lm_head.weight` that differs from `shared.weight` is an own head (v1.1),
otherwise the head is the token table. Whether decoder states are scaled
by D**-0.5 comes from `scale_decoder_outputs` (newer configs) or else from
`tie_word_embeddings` (older ones: False marks v1.1, which does not scale).
"""

from typing import Any

import numpy as np

from zoo.convert import common
from zoo.models import t5

ARCHITECTURES = ("T5ForConditionalGeneration", "T5Model",
                 "MT5ForConditionalGeneration", "MT5Model")
MODEL_TYPES = ("t5", "mt5")

# Hugging Face `dense_act_fn` names -> zoo.models.layers names.
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_tanh",
               "gelu_pytorch_tanh": "gelu_tanh", "silu": "silu",
               "swish": "silu"}


def activation(feed_forward_proj: str) -> str:
  """The zoo activation of a T5 `feed_forward_proj` ("gated-gelu", ...)."""
  parts = feed_forward_proj.split("-")
  gated = len(parts) == 2 and parts[0] == "gated"
  if len(parts) > 2 or (len(parts) == 2 and not gated):
    raise ValueError(f"feed_forward_proj {feed_forward_proj!r} is not "
                     "'<act>' or 'gated-<act>'")
  # Hugging Face reads "gated-gelu" as the tanh approximation (gelu_new).
  name = "gelu_new" if feed_forward_proj == "gated-gelu" else parts[-1]
  if name not in ACTIVATIONS:
    raise ValueError(f"unsupported T5 activation {name!r}; supported: "
                     f"{sorted(ACTIVATIONS)}")
  return ("gated_" if gated else "") + ACTIVATIONS[name]


def scales_logits(hf: dict[str, Any]) -> bool:
  """Whether the decoder output is scaled by D**-0.5 before the head."""
  if "scale_decoder_outputs" in hf:
    return bool(hf["scale_decoder_outputs"])
  return hf.get("tie_word_embeddings", True) is not False


def own_head(tensors: dict[str, np.ndarray]) -> bool:
  """True when the checkpoint stores an LM head distinct from the table."""
  head = tensors.get("lm_head.weight")
  return head is not None and not np.array_equal(head, tensors["shared.weight"])


def make_config(hf: dict[str, Any], tied: bool) -> t5.Config:
  """The zoo Config of a Hugging Face T5 config dict."""
  layers = hf.get("num_layers", 6)
  return t5.Config(
      vocab_size=hf["vocab_size"], pad_id=hf.get("pad_token_id", 0),
      dropout_rate=hf.get("dropout_rate", 0.1), num_layers=layers,
      num_decoder_layers=hf.get("num_decoder_layers") or layers,
      embed_dim=hf["d_model"], num_heads=hf["num_heads"],
      head_dim=hf["d_kv"], mlp_dim=hf["d_ff"],
      activation=activation(hf.get("feed_forward_proj", "relu")),
      norm_eps=hf.get("layer_norm_epsilon", 1e-6),
      relpos_buckets=hf.get("relative_attention_num_buckets", 32),
      relpos_max_distance=hf.get("relative_attention_max_distance", 128),
      tie_embeddings=tied, scale_logits=scales_logits(hf))


def attention(r: common.Reader, p: str, heads: int) -> dict[str, Any]:
  """A bias-free MultiHeadAttention subtree from `p.{q,k,v,o}`."""
  d = r.get(p + "q.weight").shape[1]
  inner = r.get(p + "q.weight").shape[0]
  shape = (heads, inner // heads)
  out = {name: r.linear(p + mod, (d,), shape, bias=False)
         for name, mod in (("query", "q"), ("key", "k"), ("value", "v"))}
  out["out"] = r.linear(p + "o", shape, (d,), bias=False)
  return out


def mlp(r: common.Reader, p: str) -> dict[str, Any]:
  """The Mlp subtree from `p.DenseReluDense.*` (plain or gated)."""
  names = ("wi_0", "wi_1", "wo") if r.has(p + "wi_0.weight") else ("wi", "wo")
  return {n: r.linear(p + n, bias=False) for n in names}


def block(r: common.Reader, p: str, heads: int, decoder: bool
          ) -> dict[str, Any]:
  """One pre-LN Block subtree from `p.layer.<j>.*`."""
  out = {"attention": attention(r, p + "layer.0.SelfAttention.", heads),
         "attention_norm": r.norm(p + "layer.0.layer_norm", bias=False)}
  j = 1
  if decoder:
    out["cross_attention"] = attention(r, p + "layer.1.EncDecAttention.",
                                       heads)
    out["cross_attention_norm"] = r.norm(p + "layer.1.layer_norm", bias=False)
    j = 2
  out["mlp"] = mlp(r, f"{p}layer.{j}.DenseReluDense.")
  out["mlp_norm"] = r.norm(f"{p}layer.{j}.layer_norm", bias=False)
  return out


def stack(r: common.Reader, name: str, heads: int) -> dict[str, Any]:
  """The `t5.Stack` subtree of "encoder" or "decoder"."""
  n = common.num_layers(r, name + ".block.{}.")
  if n == 0:
    raise KeyError(f"checkpoint has no {name}.block.0.* tensors")
  decoder = name == "decoder"
  bias = f"{name}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
  return {"relpos": {"rel_embedding": r.get(bias)},
          "stack": {f"layer_{i}": block(r, f"{name}.block.{i}.", heads, decoder)
                    for i in range(n)},
          "final_norm": r.norm(f"{name}.final_layer_norm", bias=False)}


def convert(hf: dict[str, Any], tensors: dict[str, np.ndarray]):
  """`(family, Config, params)` of a T5 or mT5 encoder-decoder checkpoint."""
  if "shared.weight" not in tensors:
    raise KeyError("T5 checkpoint has no shared.weight (token table); keys: "
                   f"{sorted(tensors)[:8]}")
  untied = own_head(tensors)
  config = make_config(hf, tied=not untied)
  r = common.Reader(tensors)
  # The per-stack copies of the table are the same tensor as shared.weight.
  for alias in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight"):
    if alias in tensors:
      r.used.add(alias)
  params = {"token_embed": r.embed("shared"),
            "encoder": stack(r, "encoder", config.num_heads),
            "decoder": stack(r, "decoder", config.num_heads)}
  if untied:
    params["lm_head"] = r.linear("lm_head", bias=False)
  elif "lm_head.weight" in tensors:
    r.used.add("lm_head.weight")
  common.warn_unused(r, "t5")
  return "t5", config, params


# Export (`zoo.convert.export`): the Hugging Face side of a zoo config.
FAMILIES = ("t5",)


def feed_forward_proj(zoo_activation: str) -> str:
  """The `feed_forward_proj` that `activation` reads as `zoo_activation`."""
  gated = zoo_activation.startswith("gated_")
  base = zoo_activation.removeprefix("gated_")
  if gated and base == "gelu_tanh":
    return "gated-gelu"
  name = common.hf_name(ACTIVATIONS, base, "T5 activation")
  return ("gated-" if gated else "") + name


def hf_config(family: str, config: t5.Config) -> dict[str, Any]:
  """The Hugging Face config dict `make_config` reads back as `config`."""
  del family
  return dict(
      model_type="t5", vocab_size=config.vocab_size, d_model=config.embed_dim,
      d_kv=config.head_dim, d_ff=config.mlp_dim, num_layers=config.num_layers,
      num_decoder_layers=config.num_decoder_layers or config.num_layers,
      num_heads=config.num_heads,
      relative_attention_num_buckets=config.relpos_buckets,
      relative_attention_max_distance=config.relpos_max_distance,
      dropout_rate=config.dropout_rate, layer_norm_epsilon=config.norm_eps,
      feed_forward_proj=feed_forward_proj(config.activation),
      # transformers 5 reads this flag as "scale the decoder output" and
      # ties the head unless the checkpoint stores its own (`untied`).
      tie_word_embeddings=config.scale_logits, pad_token_id=config.pad_id,
      decoder_start_token_id=config.pad_id, is_encoder_decoder=True)


def untied(config: t5.Config) -> tuple[str, ...]:
  """Reference tensors stored apart from the table they are tied to."""
  return () if config.tie_embeddings else ("lm_head.weight",)


def architecture(family: str, config: t5.Config, params) -> str:
  """T5 goes out whole, with its LM head."""
  del family, config, params
  return "T5ForConditionalGeneration"
