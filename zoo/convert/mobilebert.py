"""Hugging Face MobileBERT checkpoints -> `zoo.models.mobilebert`.

The reference's names under `mobilebert.` (a bare `MobileBertModel` has no
prefix), each layer's at `encoder.layer.<i>.`:

  bottleneck.input.{dense,LayerNorm}      -> input_bottleneck[_norm]
  bottleneck.attention.{dense,LayerNorm}  -> attention_bottleneck[_norm]
  attention.self.{query,key,value}, attention.output.dense -> attention
  attention.output.LayerNorm              -> attention_norm
  ffn.<j>.{intermediate,output}.dense     -> ffn_<j> (wi, wo)
  ffn.<j>.output.LayerNorm                -> ffn_<j>_norm
  intermediate.dense, output.dense        -> mlp (wi, wo)
  output.LayerNorm                        -> mlp_norm
  output.bottleneck.{dense,LayerNorm}     -> output_bottleneck[_norm]

The MLM head (`cls.predictions.`): transform.{dense,LayerNorm} -> mlm
transform and norm, `dense.weight` [D - E, V] -> mlm/extra as stored,
`bias` (tied to `decoder.bias`) -> mlm/bias; `decoder.weight` is the token
table. Tensors the reference holds but never reads (the embedding
transformation when E = D without trigrams, an empty `dense` when E = D)
are passed over; export writes the first freshly initialised.
"""

import dataclasses
from typing import Any

import numpy as np

from zoo.convert import bert as bert_convert
from zoo.convert import common
from zoo.models import mobilebert

ARCHITECTURES = ("MobileBertModel", "MobileBertForMaskedLM",
                 "MobileBertForPreTraining")
MODEL_TYPES = ("mobilebert",)


def make_config(hf: dict[str, Any]) -> mobilebert.Config:
  """The zoo Config of a Hugging Face MobileBERT config dict."""
  d = mobilebert.Config
  return mobilebert.Config(
      vocab_size=hf["vocab_size"], pad_id=hf.get("pad_token_id", 0),
      dropout_rate=hf.get("hidden_dropout_prob", 0.0),
      attention_dropout_rate=hf.get("attention_probs_dropout_prob", 0.1),
      num_layers=hf["num_hidden_layers"], embed_dim=hf["hidden_size"],
      num_heads=hf["num_attention_heads"], mlp_dim=hf["intermediate_size"],
      max_len=hf["max_position_embeddings"],
      type_vocab_size=hf.get("type_vocab_size", 2),
      activation=bert_convert.activation(hf.get("hidden_act", "relu")),
      norm_eps=hf.get("layer_norm_eps", 1e-12),
      embedding_dim=hf.get("embedding_size", d.embedding_dim),
      trigram_input=hf.get("trigram_input", d.trigram_input),
      use_bottleneck=hf.get("use_bottleneck", d.use_bottleneck),
      intra_dim=hf.get("intra_bottleneck_size", d.intra_dim),
      use_bottleneck_attention=hf.get("use_bottleneck_attention",
                                      d.use_bottleneck_attention),
      key_query_shared_bottleneck=hf.get("key_query_shared_bottleneck",
                                         d.key_query_shared_bottleneck),
      num_feedforward_networks=hf.get("num_feedforward_networks",
                                      d.num_feedforward_networks),
      normalization_type=hf.get("normalization_type", d.normalization_type),
      classifier_activation=hf.get("classifier_activation",
                                   d.classifier_activation))


def embeddings(r: common.Reader, config: mobilebert.Config) -> dict:
  """The `Embeddings` subtree from `embeddings.*`."""
  out = {"token": r.embed("embeddings.word_embeddings"),
         "position": r.embed("embeddings.position_embeddings"),
         "token_type": r.embed("embeddings.token_type_embeddings"),
         "norm": r.norm("embeddings.LayerNorm")}
  name = "embeddings.embedding_transformation"
  if config.trigram_input or config.embedding_dim != config.embed_dim:
    out["transform"] = r.linear(name)
  elif r.has(name + ".weight"):
    r.linear(name)  # held by the reference, never read by it
  return out


def attention(r: common.Reader, p: str, config: mobilebert.Config) -> dict:
  """The `Attention` subtree from `attention.` at prefix `p`."""
  shape = (config.num_heads, config.inner_dim // config.num_heads)
  out = {}
  for name in ("query", "key", "value"):
    w = r.get(f"{p}attention.self.{name}.weight")
    out[name] = r.linear(f"{p}attention.self.{name}", (w.shape[1],), shape)
  out["out"] = r.linear(p + "attention.output.dense", shape,
                        (config.inner_dim,))
  return out


def _ffn(r: common.Reader, wi: str, wo: str) -> dict:
  return {"wi": r.linear(wi), "wo": r.linear(wo)}


def layer(r: common.Reader, p: str, config: mobilebert.Config) -> dict:
  """One `mobilebert.Layer` subtree from `encoder.layer.<i>.` at `p`."""
  out = {"attention": attention(r, p, config),
         "attention_norm": r.norm(p + "attention.output.LayerNorm"),
         "mlp": _ffn(r, p + "intermediate.dense", p + "output.dense"),
         "mlp_norm": r.norm(p + "output.LayerNorm")}
  for j in range(config.num_feedforward_networks - 1):
    f = f"{p}ffn.{j}."
    out[f"ffn_{j}"] = _ffn(r, f + "intermediate.dense", f + "output.dense")
    out[f"ffn_{j}_norm"] = r.norm(f + "output.LayerNorm")
  for ours, theirs in _bottlenecks(config):
    out[ours] = r.linear(f"{p}{theirs}.dense")
    out[ours + "_norm"] = r.norm(f"{p}{theirs}.LayerNorm")
  unread = f"{p}bottleneck.attention."  # built, unread, without kq sharing
  if r.has(unread + "dense.weight") and "attention_bottleneck" not in out:
    r.linear(unread + "dense")
    r.norm(unread + "LayerNorm")
  return out


def _bottlenecks(config: mobilebert.Config) -> list[tuple[str, str]]:
  """(zoo, reference) names of the bottlenecks a layer reads."""
  if not config.use_bottleneck:
    return []
  out = [("input_bottleneck", "bottleneck.input"),
         ("output_bottleneck", "output.bottleneck")]
  if (config.key_query_shared_bottleneck
      and not config.use_bottleneck_attention):
    out.append(("attention_bottleneck", "bottleneck.attention"))
  return out


def mlm_head(top: common.Reader, config: mobilebert.Config) -> dict | None:
  """The `MlmHead` subtree from `cls.predictions.`, if there is one."""
  p = "cls.predictions."
  if not top.has(p + "transform.dense.weight"):
    return None
  bias = p + "bias" if top.has(p + "bias") else p + "decoder.bias"
  out = {"transform": top.linear(p + "transform.dense"),
         "norm": top.norm(p + "transform.LayerNorm"), "bias": top.get(bias)}
  extra = top.get(p + "dense.weight")  # [D - E, V], applied as stored
  if config.embed_dim > config.embedding_dim:
    out["extra"] = extra
  for tied in (p + "decoder.weight", p + "decoder.bias"):
    if top.has(tied):
      top.get(tied)  # the token table and the bias
  return out


def convert(hf: dict[str, Any], tensors: dict[str, np.ndarray]):
  """`("mobilebert", Config, params)` of a MobileBERT checkpoint."""
  # The NSP head only where the checkpoint has one (MobileBertForPreTraining).
  config = dataclasses.replace(make_config(hf), nsp_head=(
      "cls.seq_relationship.weight" in tensors))
  top = common.Reader(tensors)
  r = top.with_prefix(common.base_prefix(
      tensors, ("mobilebert.",), "embeddings.word_embeddings.weight"))
  n = common.num_layers(r, "encoder.layer.{}.")
  params = {"embeddings": embeddings(r, config),
            "encoder": {f"layer_{i}": layer(r, f"encoder.layer.{i}.", config)
                        for i in range(n)}}
  if r.has("pooler.dense.weight"):
    params["pooler"] = r.linear("pooler.dense")
  mlm = mlm_head(top, config)
  if mlm is not None:
    params["mlm"] = mlm
  if top.has("cls.seq_relationship.weight"):
    params["nsp"] = top.linear("cls.seq_relationship")
  common.warn_unused(top, "mobilebert")
  return "mobilebert", config, params


# Export (`zoo.convert.export`): the Hugging Face side of a zoo config.
FAMILIES = ("mobilebert",)


def hf_config(family: str, config: mobilebert.Config) -> dict[str, Any]:
  """The Hugging Face config dict `make_config` reads back as `config`."""
  return dict(
      bert_convert.hf_config(family, config),
      embedding_size=config.embedding_dim,
      trigram_input=config.trigram_input,
      use_bottleneck=config.use_bottleneck,
      intra_bottleneck_size=config.intra_dim,
      use_bottleneck_attention=config.use_bottleneck_attention,
      key_query_shared_bottleneck=config.key_query_shared_bottleneck,
      num_feedforward_networks=config.num_feedforward_networks,
      normalization_type=config.normalization_type,
      classifier_activation=config.classifier_activation)


def architecture(family: str, config: mobilebert.Config, params) -> str:
  """The Hugging Face class that holds the heads `params` has."""
  del family, config
  if "mlm" in params:
    return ("MobileBertForPreTraining" if "nsp" in params
            else "MobileBertForMaskedLM")
  return "MobileBertModel"
