"""Hugging Face Reformer checkpoints -> `zoo.models.reformer`.

`ReformerModelWithLMHead` (a causal LM: `is_decoder`) or its bare
`ReformerModel`. The reference lists one attention kind per layer
(`attn_layers`); the zoo keeps the shortest period of that list and
groups the layers into units of one period (`encoder/layer_<u>/
<kind>_<j>`). Axial position tables are stored [1, .., A_i, .., 1, d_i];
the LM head's spare `lm_head.bias` (the decoder's own bias is the one the
reference adds) is read and left.
"""

import dataclasses
import math
from typing import Any

import numpy as np

from zoo.convert import bert as bert_convert
from zoo.convert import common
from zoo.models import reformer

ARCHITECTURES = ("ReformerModel", "ReformerModelWithLMHead")
MODEL_TYPES = ("reformer",)


def period(kinds: list[str]) -> tuple[str, ...]:
  """The shortest prefix of `kinds` that repeats to all of it."""
  kinds = tuple(kinds)
  for p in range(1, len(kinds) + 1):
    if len(kinds) % p == 0 and kinds[:p] * (len(kinds) // p) == kinds:
      return kinds[:p]
  raise ValueError("reformer attn_layers is empty")


def _check(hf: dict[str, Any]) -> None:
  """Refuses reference settings the zoo's causal Reformer does not run."""
  if not hf.get("is_decoder", False):
    raise ValueError("reformer checkpoint has is_decoder=False: the zoo's "
                     "Reformer is a causal LM (its attention is always "
                     "causal); only decoder checkpoints convert")
  for kind in ("local", "lsh"):
    if hf.get(f"{kind}_num_chunks_after", 0):
      raise ValueError(f"reformer {kind}_num_chunks_after="
                       f"{hf[f'{kind}_num_chunks_after']}: a causal model "
                       "reads no later chunks (set it to 0)")
  if hf.get("num_buckets") is None:
    raise ValueError("reformer num_buckets is None: the reference picks it "
                     "from the first sequence it sees; set it in "
                     "config.json")


def make_config(hf: dict[str, Any]) -> reformer.Config:
  """The zoo Config of a Hugging Face Reformer config dict."""
  _check(hf)
  kinds = list(hf["attn_layers"])
  axial = hf.get("axial_pos_embds", True)
  pad, seed = hf.get("pad_token_id", 0), hf.get("hash_seed")
  shape = tuple(hf["axial_pos_shape"]) if axial else ()
  max_len = hf["max_position_embeddings"]
  return reformer.Config(
      vocab_size=hf["vocab_size"], pad_id=-1 if pad is None else pad,
      dropout_rate=hf.get("hidden_dropout_prob", 0.05),
      attention_dropout_rate=hf.get("local_attention_probs_dropout_prob",
                                    0.05),
      lsh_dropout_rate=hf.get("lsh_attention_probs_dropout_prob", 0.0),
      num_layers=len(kinds), embed_dim=hf["hidden_size"],
      num_heads=hf["num_attention_heads"],
      head_dim=hf["attention_head_size"], mlp_dim=hf["feed_forward_size"],
      activation=bert_convert.activation(hf.get("hidden_act", "relu")),
      norm_eps=hf.get("layer_norm_eps", 1e-12), attn_layers=period(kinds),
      local_chunk=hf["local_attn_chunk_length"],
      local_before=hf.get("local_num_chunks_before", 1),
      lsh_chunk=hf["lsh_attn_chunk_length"],
      lsh_before=hf.get("lsh_num_chunks_before", 1),
      num_buckets=hf["num_buckets"], num_hashes=hf.get("num_hashes", 1),
      hash_seed=reformer.Config.hash_seed if seed is None else seed,
      max_len=min(max_len, math.prod(shape)) if axial else max_len,
      axial_shape=shape,
      axial_dims=tuple(hf["axial_pos_embds_dim"]) if axial else (),
      ff_chunk=hf.get("chunk_size_feed_forward", 0) or 0)


def layer(r: common.Reader, p: str, kind: str, heads: int) -> dict:
  """One reversible layer's subtree from `encoder.layers.<i>.`."""
  a = p + "attention."
  names = ("query_key", "value") if kind == "lsh" else ("query", "key",
                                                        "value")
  w = r.get(a + f"self_attention.{names[0]}.weight")
  d, inner = w.shape[1], w.shape[0]
  shape = (heads, inner // heads)
  attention = {n: r.linear(a + f"self_attention.{n}", (d,), shape,
                           bias=False) for n in names}
  attention["out"] = r.linear(a + "output.dense", shape, (d,), bias=False)
  attention["norm"] = r.norm(a + "layer_norm")
  f = p + "feed_forward."
  mlp = {"wi": r.linear(f + "dense.dense"), "wo": r.linear(f + "output.dense")}
  return {"attention": attention,
          "feed_forward": {"norm": r.norm(f + "layer_norm"), "mlp": mlp}}


def positions(r: common.Reader, config: reformer.Config) -> dict:
  """The `position` subtree: axial tables [A_i, d_i], or a [P, D] table."""
  p = "embeddings.position_embeddings."
  if not config.axial_shape:
    return r.embed(p + "embedding")
  return {f"axis_{i}": r.get(p + f"weights.{i}").reshape(size, dim)
          for i, (size, dim) in enumerate(zip(config.axial_shape,
                                              config.axial_dims))}


def convert(hf: dict[str, Any], tensors: dict[str, np.ndarray]):
  """`("reformer", Config, params)` of a Reformer checkpoint."""
  config = make_config(hf)
  top = common.Reader(tensors)
  r = top.with_prefix(common.base_prefix(
      tensors, ("reformer.",), "embeddings.word_embeddings.weight"))
  kinds = list(hf["attn_layers"])
  units = {f"layer_{u}": {} for u in range(config.units)}
  for i, kind in enumerate(kinds):
    j = i % config.period
    units[f"layer_{i // config.period}"][f"{kind}_{j}"] = layer(
        r, f"encoder.layers.{i}.", kind, config.num_heads)
  params = {"token": r.embed("embeddings.word_embeddings"),
            "position": positions(r, config), "encoder": units,
            "final_norm": r.norm("encoder.layer_norm")}
  if top.has("lm_head.decoder.weight"):
    params["head"] = top.linear("lm_head.decoder")
    if top.has("lm_head.bias"):
      top.get("lm_head.bias")  # unused by the reference's forward
  common.warn_unused(top, "reformer")
  return "reformer", config, params


# Export (`zoo.convert.export`): the Hugging Face side of a zoo config.
FAMILIES = ("reformer",)


def hf_config(family: str, config: reformer.Config) -> dict[str, Any]:
  """The Hugging Face config dict `make_config` reads back as `config`."""
  del family
  axial = bool(config.axial_shape)
  return dict(
      model_type="reformer", is_decoder=True, vocab_size=config.vocab_size,
      hidden_size=config.embed_dim, num_attention_heads=config.num_heads,
      attention_head_size=config.head_dim,
      feed_forward_size=config.mlp_dim,
      attn_layers=list(config.attn_layers) * config.units,
      hidden_act=common.hf_name(bert_convert.ACTIVATIONS, config.activation,
                                "activation"),
      hidden_dropout_prob=config.dropout_rate,
      local_attention_probs_dropout_prob=config.attention_dropout_rate,
      lsh_attention_probs_dropout_prob=config.lsh_dropout_rate,
      layer_norm_eps=config.norm_eps,
      local_attn_chunk_length=config.local_chunk,
      local_num_chunks_before=config.local_before, local_num_chunks_after=0,
      lsh_attn_chunk_length=config.lsh_chunk,
      lsh_num_chunks_before=config.lsh_before, lsh_num_chunks_after=0,
      num_buckets=(config.num_buckets if isinstance(config.num_buckets, int)
                   else list(config.num_buckets)),
      num_hashes=config.num_hashes,
      hash_seed=(None if config.hash_seed == reformer.Config.hash_seed
                 else config.hash_seed),
      max_position_embeddings=config.max_len, axial_pos_embds=axial,
      axial_pos_shape=list(config.axial_shape) if axial else [64, 64],
      axial_pos_embds_dim=list(config.axial_dims) if axial else [64, 192],
      chunk_size_feed_forward=config.ff_chunk,
      pad_token_id=None if config.pad_id < 0 else config.pad_id)


def prepare_export(family: str, config: reformer.Config, params):
  """`(config, params)` with `reversible` (how the zoo differentiates,
  nothing the reference reads) back at its default."""
  del family
  return dataclasses.replace(config, reversible=True), params


def architecture(family: str, config: reformer.Config, params) -> str:
  """The LM when `params` have the head, else the bare model."""
  del family, config
  return "ReformerModelWithLMHead" if "head" in params else "ReformerModel"
