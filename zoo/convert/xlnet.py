"""Hugging Face XLNet checkpoints -> `zoo.models.xlnet`."""

import dataclasses
import logging
from typing import Any

import numpy as np

from zoo.convert import bert as bert_convert
from zoo.convert import common
from zoo.models import xlnet

ARCHITECTURES = ("XLNetModel", "XLNetLMHeadModel")
MODEL_TYPES = ("xlnet",)


def make_config(hf: dict[str, Any]) -> xlnet.Config:
  """The zoo Config of a Hugging Face XLNet config dict.

  Raises:
    ValueError: attn_type "uni" or bi_data, which the zoo model refuses.
  """
  if hf.get("attn_type", "bi") != "bi":
    raise ValueError(f"xlnet attn_type {hf['attn_type']!r} is not "
                     "supported; only 'bi' (the released models': a causal "
                     "order is a perm_mask)")
  d, n = hf["d_model"], hf["n_head"]
  pad = hf.get("pad_token_id")
  dropout = hf.get("dropout", 0.1)
  return xlnet.Config(
      vocab_size=hf["vocab_size"], pad_id=-1 if pad is None else pad,
      dropout_rate=dropout, attention_dropout_rate=dropout,
      num_layers=hf["n_layer"], embed_dim=d, num_heads=n,
      head_dim=hf.get("d_head") or d // n, mlp_dim=hf["d_inner"],
      activation=bert_convert.activation(hf.get("ff_activation", "gelu")),
      norm_eps=hf.get("layer_norm_eps", 1e-12),
      mem_len=hf.get("mem_len", 512) or 0,
      reuse_len=hf.get("reuse_len") or 0,
      bi_data=bool(hf.get("bi_data", False)),
      clamp_len=hf.get("clamp_len", -1))


def layer(r: common.Reader, p: str) -> dict[str, Any]:
  """One `relative.Layer` subtree from `layer.<i>.` (q/k/v/r/o are [D, N, H])."""
  a = p + "rel_attn."
  kernel = lambda name: {"kernel": r.get(a + name)}
  attention = {
      "query": kernel("q"), "key": kernel("k"), "value": kernel("v"),
      "position": kernel("r"),
      "out": {"kernel": r.get(a + "o").transpose(1, 2, 0)},  # [N, H, D]
      "content_bias": r.get(a + "r_w_bias"),
      "position_bias": r.get(a + "r_r_bias"),
      "segment_bias": r.get(a + "r_s_bias"),
      "segment_embed": r.get(a + "seg_embed"),
  }
  return {
      "attention": attention, "attention_norm": r.norm(a + "layer_norm"),
      "mlp": {"wi": r.linear(p + "ff.layer_1"),
              "wo": r.linear(p + "ff.layer_2")},
      "mlp_norm": r.norm(p + "ff.layer_norm"),
  }


def convert(hf: dict[str, Any], tensors: dict[str, np.ndarray]):
  """`("xlnet", Config, params)` of an XLNet checkpoint."""
  config = make_config(hf)
  top = common.Reader(tensors)
  r = top.with_prefix(common.base_prefix(tensors, ("transformer.",),
                                         "word_embedding.weight"))
  n = common.num_layers(r, "layer.{}.")
  params = {
      "token": r.embed("word_embedding"),
      "mask_embed": r.get("mask_emb").reshape(-1),
      "encoder": {f"layer_{i}": layer(r, f"layer.{i}.") for i in range(n)},
  }
  if top.has("lm_loss.bias"):
    params["lm_head"] = {"bias": top.get("lm_loss.bias")}
  if top.has("lm_loss.weight"):
    top.get("lm_loss.weight")  # tied to word_embedding; the model reuses it
  common.warn_unused(top, "xlnet")
  return "xlnet", config, params


# Export (`zoo.convert.export`): the Hugging Face side of a zoo config.
FAMILIES = ("xlnet",)


def hf_config(family: str, config: xlnet.Config) -> dict[str, Any]:
  """The Hugging Face config dict `make_config` reads back as `config`.

  Raises:
    ValueError: N * H != D, which the reference cannot hold.
  """
  del family
  if config.num_heads * config.head_dim != config.embed_dim:
    raise ValueError(
        f"the reference XLNet needs head_dim = embed_dim / num_heads; this "
        f"model has {config.num_heads} x {config.head_dim} != "
        f"{config.embed_dim}")
  return dict(
      model_type="xlnet", vocab_size=config.vocab_size,
      d_model=config.embed_dim, n_layer=config.num_layers,
      n_head=config.num_heads, d_head=config.head_dim,
      d_inner=config.mlp_dim,
      ff_activation=common.hf_name(bert_convert.ACTIVATIONS,
                                   config.activation, "activation"),
      layer_norm_eps=config.norm_eps, dropout=config.dropout_rate,
      mem_len=config.mem_len or None, reuse_len=config.reuse_len or None,
      bi_data=config.bi_data, clamp_len=config.clamp_len, attn_type="bi",
      pad_token_id=None if config.pad_id < 0 else config.pad_id)


def prepare_export(family: str, config: xlnet.Config, params):
  """`(config, params)` with one dropout rate, as the reference has.

  The reference drops attention probabilities at its one `dropout`; a zoo
  model without attention dropout (the large size's default) goes out
  with `dropout_rate` there too. Inference is the same either way.
  """
  del family
  if config.attention_dropout_rate != config.dropout_rate:
    logging.warning(
        "xlnet: the reference has one dropout rate; exporting %s for the "
        "attention probabilities too (the zoo model had %s)",
        config.dropout_rate, config.attention_dropout_rate)
    config = dataclasses.replace(
        config, attention_dropout_rate=config.dropout_rate)
  return config, params


def architecture(family: str, config: xlnet.Config, params) -> str:
  """The LM head model when `params` have the head, else the bare model."""
  del family, config
  return "XLNetLMHeadModel" if "lm_head" in params else "XLNetModel"
