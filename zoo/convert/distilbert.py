"""Hugging Face DistilBERT checkpoints -> `zoo.models.distilbert`."""

from typing import Any

import numpy as np

from zoo.convert import bert as bert_convert
from zoo.convert import common
from zoo.models import distilbert

ARCHITECTURES = ("DistilBertModel", "DistilBertForMaskedLM")
MODEL_TYPES = ("distilbert",)


def make_config(hf: dict[str, Any]) -> distilbert.Config:
  """The zoo Config of a Hugging Face DistilBERT config dict."""
  return distilbert.Config(
      vocab_size=hf["vocab_size"], pad_id=hf.get("pad_token_id", 0),
      dropout_rate=hf.get("dropout", 0.1),
      attention_dropout_rate=hf.get("attention_dropout", 0.1),
      num_layers=hf["n_layers"], embed_dim=hf["dim"],
      num_heads=hf["n_heads"], mlp_dim=hf["hidden_dim"],
      max_len=hf["max_position_embeddings"],
      activation=bert_convert.activation(hf.get("activation", "gelu")))


def layer(r: common.Reader, p: str, heads: int) -> dict[str, Any]:
  """One post-LN Block subtree from `transformer.layer.<i>.`."""
  a = p + "attention."
  return {
      "attention": common.attention(r, a + "q_lin", a + "k_lin", a + "v_lin",
                                    a + "out_lin", heads),
      "attention_norm": r.norm(p + "sa_layer_norm"),
      "mlp": {"wi": r.linear(p + "ffn.lin1"), "wo": r.linear(p + "ffn.lin2")},
      "mlp_norm": r.norm(p + "output_layer_norm"),
  }


def convert(hf: dict[str, Any], tensors: dict[str, np.ndarray]):
  """`("distilbert", Config, params)` of a DistilBERT checkpoint."""
  config = make_config(hf)
  top = common.Reader(tensors)
  r = top.with_prefix(common.base_prefix(
      tensors, ("distilbert.",), "embeddings.word_embeddings.weight"))
  n = common.num_layers(r, "transformer.layer.{}.")
  params = {
      "embeddings": {"token": r.embed("embeddings.word_embeddings"),
                     "position": r.embed("embeddings.position_embeddings"),
                     "norm": r.norm("embeddings.LayerNorm")},
      "encoder": {f"layer_{i}": layer(r, f"transformer.layer.{i}.",
                                      config.num_heads) for i in range(n)},
  }
  if top.has("vocab_transform.weight"):
    params["mlm"] = {"transform": top.linear("vocab_transform"),
                     "norm": top.norm("vocab_layer_norm"),
                     "bias": top.get("vocab_projector.bias")}
    if top.has("vocab_projector.weight"):
      top.get("vocab_projector.weight")  # tied to the token table
  common.warn_unused(top, "distilbert")
  return "distilbert", config, params


# Export (`zoo.convert.export`): the Hugging Face side of a zoo config.
FAMILIES = ("distilbert",)


def hf_config(family: str, config: distilbert.Config) -> dict[str, Any]:
  """The Hugging Face config dict `make_config` reads back as `config`."""
  del family
  return dict(
      model_type="distilbert", vocab_size=config.vocab_size,
      dim=config.embed_dim, n_layers=config.num_layers,
      n_heads=config.num_heads, hidden_dim=config.mlp_dim,
      activation=common.hf_name(bert_convert.ACTIVATIONS, config.activation,
                                "activation"),
      dropout=config.dropout_rate,
      attention_dropout=config.attention_dropout_rate,
      max_position_embeddings=config.max_len, pad_token_id=config.pad_id,
      sinusoidal_pos_embds=False)


def architecture(family: str, config: distilbert.Config, params) -> str:
  """`DistilBertForMaskedLM` with an MLM head, else the bare model."""
  del family, config
  return "DistilBertForMaskedLM" if "mlm" in params else "DistilBertModel"
