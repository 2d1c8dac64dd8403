"""Hugging Face ELECTRA checkpoints -> `zoo.models.electra`.

`ElectraForPreTraining` is a discriminator, `ElectraForMaskedLM` a
generator (as released, each its own checkpoint with its own embeddings).
"""

from typing import Any

import numpy as np

from zoo.convert import bert as bert_convert
from zoo.convert import common
from zoo.models import electra

ARCHITECTURES = ("ElectraModel", "ElectraForPreTraining",
                 "ElectraForMaskedLM")
MODEL_TYPES = ("electra",)


def make_config(hf: dict[str, Any], role: str) -> electra.Config:
  """The zoo Config of a Hugging Face ELECTRA config dict."""
  bert_convert.check_absolute_positions(hf)
  return electra.Config(
      vocab_size=hf["vocab_size"], pad_id=hf.get("pad_token_id", 0),
      dropout_rate=hf.get("hidden_dropout_prob", 0.1),
      attention_dropout_rate=hf.get("attention_probs_dropout_prob", 0.1),
      num_layers=hf["num_hidden_layers"], embed_dim=hf["hidden_size"],
      num_heads=hf["num_attention_heads"], mlp_dim=hf["intermediate_size"],
      max_len=hf["max_position_embeddings"],
      type_vocab_size=hf.get("type_vocab_size", 2),
      activation=bert_convert.activation(hf.get("hidden_act", "gelu")),
      norm_eps=hf.get("layer_norm_eps", 1e-12),
      embedding_dim=hf["embedding_size"], role=role)


def _role(hf: dict[str, Any], tensors: dict[str, np.ndarray]) -> str:
  if "ElectraForMaskedLM" in (hf.get("architectures") or ()):
    return "generator"
  return ("generator" if "generator_predictions.dense.weight" in tensors
          else "discriminator")


def head(top: common.Reader, role: str) -> dict[str, Any] | None:
  """The role's head subtree, if the checkpoint has it."""
  if role == "generator" and top.has("generator_predictions.dense.weight"):
    if top.has("generator_lm_head.weight"):
      top.get("generator_lm_head.weight")  # tied to the token table
    return {"mlm": {"transform": top.linear("generator_predictions.dense"),
                    "norm": top.norm("generator_predictions.LayerNorm"),
                    "bias": top.get("generator_lm_head.bias")}}
  if role == "discriminator" and top.has(
      "discriminator_predictions.dense.weight"):
    return {"transform": top.linear("discriminator_predictions.dense"),
            "score": top.linear("discriminator_predictions.dense_prediction")}
  return None


def convert(hf: dict[str, Any], tensors: dict[str, np.ndarray]):
  """`("electra", Config, params)` of an ELECTRA checkpoint."""
  config = make_config(hf, _role(hf, tensors))
  top = common.Reader(tensors)
  r = top.with_prefix(common.base_prefix(
      tensors, ("electra.",), "embeddings.word_embeddings.weight"))
  body = {"encoder": bert_convert.encoder(r, config.num_heads)}
  if r.has("embeddings_project.weight"):
    body["embed_proj"] = r.linear("embeddings_project")
  body.update(head(top, config.role) or {})
  params = {"embeddings": bert_convert.embeddings(r), "body": body}
  common.warn_unused(top, "electra")
  return "electra", config, params


# Export (`zoo.convert.export`): the Hugging Face side of a zoo config.
FAMILIES = ("electra",)


def hf_config(family: str, config: electra.Config) -> dict[str, Any]:
  """The Hugging Face config dict `make_config` reads back as `config`."""
  out = bert_convert.hf_config("bert", config)
  return dict(out, model_type=family, embedding_size=config.embedding_dim)


def architecture(family: str, config: electra.Config, params) -> str:
  """The generator with its MLM head; the discriminator with its RTD head."""
  del family
  if config.role == "generator":
    return "ElectraForMaskedLM"
  return ("ElectraForPreTraining" if "transform" in params.get("body", {})
          else "ElectraModel")
