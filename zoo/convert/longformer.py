"""Hugging Face Longformer checkpoints -> `zoo.models.longformer`.

The layout is RoBERTa's (`zoo.convert.bert`) under `longformer.`, with the
global projections (`query_global`, `key_global`, `value_global`) beside
each layer's query, key and value.
"""

import dataclasses
from typing import Any

import numpy as np

from zoo.convert import bert as bert_convert
from zoo.convert import common
from zoo.models import longformer

ARCHITECTURES = ("LongformerModel", "LongformerForMaskedLM")
MODEL_TYPES = ("longformer",)


def attention_window(hf: dict[str, Any]) -> int:
  """The one attention window of a config (an int, or one per layer).

  Raises:
    ValueError: layers with different windows (the zoo model has one).
  """
  window = hf.get("attention_window", 512)
  if isinstance(window, int):
    return window
  windows = set(window)
  if len(windows) != 1:
    raise ValueError(f"longformer attention_window {list(window)} differs "
                     "between layers; the zoo model has one window for all")
  return windows.pop()


def make_config(hf: dict[str, Any]) -> longformer.Config:
  """The zoo Config of a Hugging Face Longformer config dict."""
  pad = hf.get("pad_token_id", 1)
  return longformer.Config(
      vocab_size=hf["vocab_size"], pad_id=pad,
      dropout_rate=hf.get("hidden_dropout_prob", 0.1),
      attention_dropout_rate=hf.get("attention_probs_dropout_prob", 0.1),
      num_layers=hf["num_hidden_layers"], embed_dim=hf["hidden_size"],
      num_heads=hf["num_attention_heads"], mlp_dim=hf["intermediate_size"],
      max_len=hf["max_position_embeddings"], position_offset=pad + 1,
      type_vocab_size=hf.get("type_vocab_size", 2),
      activation=bert_convert.activation(hf.get("hidden_act", "gelu")),
      norm_eps=hf.get("layer_norm_eps", 1e-12),
      attention_window=attention_window(hf))


def layer(r: common.Reader, p: str, heads: int) -> dict[str, Any]:
  """One `longformer.Layer` subtree from `encoder.layer.<i>.`."""
  out = bert_convert.encoder_layer(r, p, heads)
  s = p + "attention.self."
  w = r.get(s + "query_global.weight")
  d = w.shape[1]
  for name in longformer.GLOBAL_PROJECTIONS:
    out["attention"][name] = r.linear(s + name, (d,), (heads, d // heads))
  return out


def convert(hf: dict[str, Any], tensors: dict[str, np.ndarray]):
  """`("longformer", Config, params)` of a Longformer checkpoint."""
  config = make_config(hf)
  top = common.Reader(tensors)
  r = top.with_prefix(common.base_prefix(
      tensors, ("longformer.",), "embeddings.word_embeddings.weight"))
  n = common.num_layers(r, "encoder.layer.{}.")
  params = {
      "embeddings": bert_convert.embeddings(r),
      "encoder": {f"layer_{i}": layer(r, f"encoder.layer.{i}.",
                                      config.num_heads) for i in range(n)},
  }
  if r.has("pooler.dense.weight"):
    params["pooler"] = r.linear("pooler.dense")
  mlm = bert_convert.mlm_head(top, "lm_head.", "dense", "layer_norm")
  if mlm is not None:
    params["mlm"] = mlm
  for tied in ("lm_head.decoder.weight", "lm_head.decoder.bias"):
    if top.has(tied):
      top.get(tied)  # the decoder reuses the token table and the bias
  common.warn_unused(top, "longformer")
  return "longformer", config, params


# Export (`zoo.convert.export`): the Hugging Face side of a zoo config.
FAMILIES = ("longformer",)


def hf_config(family: str, config: longformer.Config) -> dict[str, Any]:
  """The Hugging Face config dict `make_config` reads back as `config`
  (a dilation other than 1 reads back as 1, so export refuses it)."""
  return dict(
      bert_convert.hf_config(family, config),
      attention_window=config.attention_window)


def prepare_export(family: str, config: longformer.Config, params):
  """`(config, params)` in the reference's conventions.

  The position table is cut as for RoBERTa (`zoo.convert.bert`), and
  `max_global` goes back to its default: the reference reads any number
  of global tokens, so the field has nothing to say there.
  """
  del family
  config, params = bert_convert.prepare_export("roberta", config, params)
  return dataclasses.replace(
      config, max_global=longformer.Config.max_global), params


def architecture(family: str, config: longformer.Config, params) -> str:
  """The MLM model when `params` have the head, else the bare model."""
  del family, config
  return "LongformerForMaskedLM" if "mlm" in params else "LongformerModel"
