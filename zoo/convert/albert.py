"""Hugging Face ALBERT checkpoints -> `zoo.models.albert`."""

from typing import Any

import numpy as np

from zoo.convert import bert as bert_convert
from zoo.convert import common
from zoo.models import albert

ARCHITECTURES = ("AlbertModel", "AlbertForMaskedLM", "AlbertForPreTraining")
MODEL_TYPES = ("albert",)


def make_config(hf: dict[str, Any]) -> albert.Config:
  """The zoo Config of a Hugging Face ALBERT config dict."""
  bert_convert.check_absolute_positions(hf)
  if hf.get("num_hidden_groups", 1) != 1 or hf.get("inner_group_num", 1) != 1:
    raise ValueError("ALBERT with num_hidden_groups or inner_group_num != 1 "
                     "is not supported (the zoo shares one block)")
  return albert.Config(
      vocab_size=hf["vocab_size"], pad_id=hf.get("pad_token_id", 0),
      dropout_rate=hf.get("hidden_dropout_prob", 0.0),
      attention_dropout_rate=hf.get("attention_probs_dropout_prob", 0.0),
      num_layers=hf["num_hidden_layers"], embed_dim=hf["hidden_size"],
      num_heads=hf["num_attention_heads"], mlp_dim=hf["intermediate_size"],
      max_len=hf["max_position_embeddings"],
      type_vocab_size=hf.get("type_vocab_size", 2),
      activation=bert_convert.activation(hf.get("hidden_act", "gelu_new")),
      norm_eps=hf.get("layer_norm_eps", 1e-12),
      embedding_dim=hf["embedding_size"])


def shared_layer(r: common.Reader, heads: int) -> dict[str, Any]:
  """The shared Block subtree from `encoder.albert_layer_groups.0...`."""
  p = "encoder.albert_layer_groups.0.albert_layers.0."
  a = p + "attention."
  return {
      "attention": common.attention(r, a + "query", a + "key", a + "value",
                                    a + "dense", heads),
      "attention_norm": r.norm(a + "LayerNorm"),
      "mlp": {"wi": r.linear(p + "ffn"), "wo": r.linear(p + "ffn_output")},
      "mlp_norm": r.norm(p + "full_layer_layer_norm"),
  }


def convert(hf: dict[str, Any], tensors: dict[str, np.ndarray]):
  """`("albert", Config, params)` of an ALBERT checkpoint."""
  config = make_config(hf)
  top = common.Reader(tensors)
  r = top.with_prefix(common.base_prefix(
      tensors, ("albert.",), "embeddings.word_embeddings.weight"))
  params = {
      "embeddings": bert_convert.embeddings(r),
      "embed_proj": r.linear("encoder.embedding_hidden_mapping_in"),
      "encoder": {"layer": shared_layer(r, config.num_heads)},
  }
  if r.has("pooler.weight"):
    params["pooler"] = r.linear("pooler")
  if top.has("sop_classifier.classifier.weight"):
    params["sop"] = top.linear("sop_classifier.classifier")
  if top.has("predictions.dense.weight"):
    params["mlm"] = {"transform": top.linear("predictions.dense"),
                     "norm": top.norm("predictions.LayerNorm"),
                     "bias": top.get("predictions.bias")}
  for tied in ("predictions.decoder.weight", "predictions.decoder.bias"):
    if top.has(tied):
      top.get(tied)
  common.warn_unused(top, "albert")
  return "albert", config, params


# Export (`zoo.convert.export`): the Hugging Face side of a zoo config.
FAMILIES = ("albert",)


def hf_config(family: str, config: albert.Config) -> dict[str, Any]:
  """The Hugging Face config dict `make_config` reads back as `config`."""
  out = bert_convert.hf_config("bert", config)
  return dict(out, model_type=family, embedding_size=config.embedding_dim,
              num_hidden_groups=1, inner_group_num=1)


def architecture(family: str, config: albert.Config, params) -> str:
  """The Hugging Face class that holds the heads `params` has."""
  del family, config
  if "mlm" in params:
    return "AlbertForPreTraining" if "sop" in params else "AlbertForMaskedLM"
  return "AlbertModel"
