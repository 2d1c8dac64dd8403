"""Hugging Face BERT and RoBERTa checkpoints -> `zoo.models.bert`."""

import dataclasses
from typing import Any

import numpy as np

from zoo.convert import common
from zoo.models import bert

ARCHITECTURES = ("BertModel", "BertForMaskedLM", "BertForPreTraining",
                 "BertForNextSentencePrediction", "RobertaModel",
                 "RobertaForMaskedLM")
MODEL_TYPES = ("bert", "roberta")

# Hugging Face activation names -> zoo.models.layers names.
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh",
               "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu",
               "silu": "silu", "swish": "silu"}


def activation(hf_name: str) -> str:
  """The zoo activation of a Hugging Face `hidden_act`."""
  if hf_name not in ACTIVATIONS:
    raise ValueError(f"unsupported hidden_act {hf_name!r}; supported: "
                     f"{sorted(ACTIVATIONS)}")
  return ACTIVATIONS[hf_name]


def check_absolute_positions(hf: dict[str, Any]) -> None:
  """Refuses relative position embeddings (a BERT variant we do not run)."""
  kind = hf.get("position_embedding_type", "absolute")
  if kind != "absolute":
    raise ValueError(f"position_embedding_type {kind!r} is not supported; "
                     "only 'absolute'")


def make_config(hf: dict[str, Any], roberta: bool) -> bert.Config:
  """The zoo Config of a Hugging Face BERT/RoBERTa config dict."""
  check_absolute_positions(hf)
  pad = hf.get("pad_token_id", 1 if roberta else 0)
  return bert.Config(
      vocab_size=hf["vocab_size"], pad_id=pad,
      dropout_rate=hf.get("hidden_dropout_prob", 0.1),
      attention_dropout_rate=hf.get("attention_probs_dropout_prob", 0.1),
      num_layers=hf["num_hidden_layers"], embed_dim=hf["hidden_size"],
      num_heads=hf["num_attention_heads"], mlp_dim=hf["intermediate_size"],
      max_len=hf["max_position_embeddings"],
      position_offset=pad + 1 if roberta else 0,
      type_vocab_size=hf.get("type_vocab_size", 2),
      activation=activation(hf.get("hidden_act", "gelu")),
      norm_eps=hf.get("layer_norm_eps", 1e-12), nsp_head=not roberta)


def embeddings(r: common.Reader) -> dict[str, Any]:
  """The `Embeddings` subtree from `embeddings.*`."""
  out = {"token": r.embed("embeddings.word_embeddings"),
         "position": r.embed("embeddings.position_embeddings"),
         "norm": r.norm("embeddings.LayerNorm")}
  if r.has("embeddings.token_type_embeddings.weight"):
    out["token_type"] = r.embed("embeddings.token_type_embeddings")
  return out


def encoder_layer(r: common.Reader, p: str, heads: int) -> dict[str, Any]:
  """One post-LN Block subtree from a BERT-style layer at prefix `p`."""
  s = p + "attention.self."
  return {
      "attention": common.attention(
          r, s + "query", s + "key", s + "value",
          p + "attention.output.dense", heads),
      "attention_norm": r.norm(p + "attention.output.LayerNorm"),
      "mlp": {"wi": r.linear(p + "intermediate.dense"),
              "wo": r.linear(p + "output.dense")},
      "mlp_norm": r.norm(p + "output.LayerNorm"),
  }


def encoder(r: common.Reader, heads: int) -> dict[str, Any]:
  """The encoder `Stack` subtree from `encoder.layer.<i>.*`."""
  n = common.num_layers(r, "encoder.layer.{}.")
  return {f"layer_{i}": encoder_layer(r, f"encoder.layer.{i}.", heads)
          for i in range(n)}


def mlm_head(r: common.Reader, p: str, dense: str, norm: str
             ) -> dict[str, Any] | None:
  """The MlmHead subtree (transform, norm, bias) if the checkpoint has it."""
  if not r.has(p + dense + ".weight"):
    return None
  return {"transform": r.linear(p + dense), "norm": r.norm(p + norm),
          "bias": r.get(p + "bias")}


def convert(hf: dict[str, Any], tensors: dict[str, np.ndarray]):
  """`(family, Config, params)` of a BERT or RoBERTa checkpoint."""
  roberta = hf.get("model_type") == "roberta" or any(
      a.startswith("Roberta") for a in hf.get("architectures") or ())
  family = "roberta" if roberta else "bert"
  config = make_config(hf, roberta)
  top = common.Reader(tensors)
  r = top.with_prefix(common.base_prefix(
      tensors, (f"{family}.",), "embeddings.word_embeddings.weight"))
  params = {"embeddings": embeddings(r),
            "encoder": encoder(r, config.num_heads)}
  if r.has("pooler.dense.weight"):
    params["pooler"] = r.linear("pooler.dense")
  if roberta:
    mlm = mlm_head(top, "lm_head.", "dense", "layer_norm")
  else:
    mlm = mlm_head(top, "cls.predictions.", "transform.dense",
                   "transform.LayerNorm")
    if top.has("cls.seq_relationship.weight"):
      params["nsp"] = top.linear("cls.seq_relationship")
  if mlm is not None:
    params["mlm"] = mlm
  for tied in ("cls.predictions.decoder.weight", "lm_head.decoder.weight",
               "cls.predictions.decoder.bias", "lm_head.decoder.bias"):
    if top.has(tied):
      top.get(tied)  # the decoder reuses the token table and the bias
  common.warn_unused(top, family)
  return family, config, params


# Export (`zoo.convert.export`): the Hugging Face side of a zoo config.
FAMILIES = ("bert", "roberta")


def hf_config(family: str, config: bert.Config) -> dict[str, Any]:
  """The Hugging Face config dict `make_config` reads back as `config`.

  Raises:
    ValueError: the config has what the reference cannot hold (ALiBi, or
      heads of another size than hidden / heads, as head pruning leaves).
  """
  if isinstance(config, bert.Config) and (config.alibi or
                                          config.trigram_input):
    raise ValueError(f"a {family} with ALiBi or trigram embeddings (alibi, "
                     "trigram_input) has no Hugging Face equivalent to "
                     "export to")
  head_dim = getattr(config, "head_dim", 0)
  if head_dim and head_dim * config.num_heads != config.embed_dim:
    raise ValueError(
        f"{config.num_heads} heads of {head_dim} in a "
        f"{config.embed_dim}-wide {family} (pruned heads): transformers "
        "sizes a head as hidden / heads and cannot load it")
  return dict(
      model_type=family, vocab_size=config.vocab_size,
      hidden_size=config.embed_dim, num_hidden_layers=config.num_layers,
      num_attention_heads=config.num_heads,
      intermediate_size=config.mlp_dim,
      hidden_act=common.hf_name(ACTIVATIONS, config.activation, "activation"),
      hidden_dropout_prob=config.dropout_rate,
      attention_probs_dropout_prob=config.attention_dropout_rate,
      max_position_embeddings=config.max_len,
      type_vocab_size=config.type_vocab_size, layer_norm_eps=config.norm_eps,
      pad_token_id=config.pad_id, position_embedding_type="absolute")


def prepare_export(family: str, config: bert.Config, params):
  """`(config, params)` in the reference's position convention.

  Hugging Face RoBERTa reads its table at position + pad_id + 1. A zoo
  RoBERTa with a larger `position_offset` (pad 0, offset 2: the zoo's own
  tokenizers) never reads the first rows; they are dropped, so the same
  positions read the same vectors.
  """
  shift = config.position_offset - (config.pad_id + 1)
  if family != "roberta" or shift <= 0:
    return config, params
  emb = dict(params["embeddings"])
  emb["position"] = {"embedding": emb["position"]["embedding"][shift:]}
  config = dataclasses.replace(config, max_len=config.max_len - shift,
                               position_offset=config.pad_id + 1)
  return config, dict(params, embeddings=emb)


def architecture(family: str, config: bert.Config, params) -> str:
  """The Hugging Face class that holds the heads `params` has."""
  del config
  if family == "roberta":
    return "RobertaForMaskedLM" if "mlm" in params else "RobertaModel"
  if "mlm" in params:
    return "BertForPreTraining" if "nsp" in params else "BertForMaskedLM"
  return "BertModel"
