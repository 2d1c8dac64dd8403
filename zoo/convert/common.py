"""Helpers shared by the Hugging Face converters of `zoo.convert`.

A converter reads torch-layout tensors by name through a `Reader` (which
remembers what it used, so leftovers can be reported) and builds the param
tree of a zoo model, unrolled (`layer_<i>`); `finish` checks that tree
against the model's own init, fills heads the checkpoint does not have, and
restacks layers for `scan_layers` (`blocks.restack`).
"""

import logging
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from zoo import models

Params = dict[str, Any]
# Buffers Hugging Face saves that are not weights.
_BUFFERS = re.compile(r"(^|\.)(position_ids|token_type_ids|masked_bias|"
                      r"attn\.bias|inv_freq)$")


class IndexTensors(dict):
  """Checkpoint tensors that hold element indices, not weights.

  Each value is an integer array of global element numbers. A converter run
  over them builds the zoo param tree of indices, which says where every
  zoo weight lives in the checkpoint: `zoo.convert.export` inverts import
  this way, so each name map is written once, in the importer.
  """


class Reader:
  """Named access to a checkpoint's tensors, with a record of use.

  Attributes:
    tensors: name -> numpy array (torch layout).
    prefix: prepended to every name asked for (e.g. "bert.").
  """

  def __init__(self, tensors: dict[str, np.ndarray], prefix: str = ""):
    self.tensors, self.prefix = tensors, prefix
    self.used: set[str] = set()

  def with_prefix(self, prefix: str) -> "Reader":
    """A reader over the same tensors and record, another prefix."""
    other = Reader(self.tensors, prefix)
    other.used = self.used
    return other

  def has(self, name: str) -> bool:
    """Whether the checkpoint holds `prefix + name`."""
    return self.prefix + name in self.tensors

  def get(self, name: str) -> np.ndarray:
    """The float32 array `prefix + name` (marked used)."""
    key = self.prefix + name
    if key not in self.tensors:
      near = sorted(k for k in self.tensors if k.endswith(name.split(".")[-1]))
      raise KeyError(f"checkpoint has no tensor {key!r}; similar: {near[:5]}")
    self.used.add(key)
    if isinstance(self.tensors, IndexTensors):
      return np.asarray(self.tensors[key])
    return np.asarray(self.tensors[key], dtype=np.float32)

  def linear(self, name: str, in_shape=None, out_shape=None, *,
             torch_linear: bool = True, bias: bool = True) -> Params:
    """A Dense subtree from `name.weight` / `name.bias`.

    Args:
      name: module name, e.g. "encoder.layer.0.attention.self.query".
      in_shape: kernel input dims (default: the weight's).
      out_shape: kernel output dims (default: the weight's).
      torch_linear: weight stored [out, in] (nn.Linear); False for GPT-2's
        Conv1D, stored [in, out].
      bias: read `name.bias`.
    """
    w = self.get(name + ".weight")
    w = w.T if torch_linear else w
    in_shape = in_shape or (w.shape[0],)
    out_shape = out_shape or (w.shape[1],)
    out = {"kernel": w.reshape(tuple(in_shape) + tuple(out_shape))}
    if bias:
      out["bias"] = self.get(name + ".bias").reshape(out_shape)
    return out

  def norm(self, name: str, bias: bool = True) -> Params:
    """A LayerNorm subtree from `name.weight` / `name.bias`."""
    out = {"scale": self.get(name + ".weight")}
    if bias:
      out["bias"] = self.get(name + ".bias")
    return out

  def embed(self, name: str) -> Params:
    """An Embed subtree from `name.weight`."""
    return {"embedding": self.get(name + ".weight")}

  def unused(self) -> list[str]:
    """Names never read, buffers excluded."""
    return sorted(k for k in self.tensors
                  if k not in self.used and not _BUFFERS.search(k))


def attention(r: Reader, q: str, k: str, v: str, o: str, heads: int, *,
              torch_linear: bool = True) -> Params:
  """A MultiHeadAttention subtree from four projection modules.

  Args:
    r: the reader.
    q, k, v, o: module names of the query/key/value/output projections.
    heads: N.
    torch_linear: see `Reader.linear`.
  """
  w = r.get(q + ".weight")
  d, inner = w.shape[::-1] if torch_linear else w.shape
  shape = (heads, inner // heads)
  out = {name: r.linear(mod, (d,), shape, torch_linear=torch_linear)
         for name, mod in (("query", q), ("key", k), ("value", v))}
  out["out"] = r.linear(o, shape, (d,), torch_linear=torch_linear)
  return out


def split_fused_qkv(r: Reader, name: str, heads: int) -> Params:
  """query/key/value subtrees from one fused Conv1D [D, 3D] (GPT-2)."""
  w, b = r.get(name + ".weight"), r.get(name + ".bias")
  d = w.shape[0]
  shape = (d, heads, d // heads)
  return {n: {"kernel": w[:, i * d:(i + 1) * d].reshape(shape),
              "bias": b[i * d:(i + 1) * d].reshape(shape[1:])}
          for i, n in enumerate(("query", "key", "value"))}


def num_layers(r: Reader, pattern: str) -> int:
  """How many layers a checkpoint has: count of `pattern.format(i)` keys."""
  n = 0
  while any(k.startswith(r.prefix + pattern.format(n)) for k in r.tensors):
    n += 1
  return n


def base_prefix(tensors: dict[str, np.ndarray], candidates: tuple[str, ...],
                marker: str) -> str:
  """The prefix (of `candidates`, or "") under which `marker` is found."""
  for p in candidates + ("",):
    if p + marker in tensors:
      return p
  raise KeyError(f"no tensor {marker!r} under any prefix of {candidates}; "
                 f"is this the right architecture? keys: {sorted(tensors)[:8]}")


def param_shapes(family: str, config) -> Params:
  """Unboxed `jax.ShapeDtypeStruct`s of `family`'s params at `config`."""
  model = models.get(family).Model(config)
  tokens = jnp.zeros((1, 4), jnp.int32)
  interface = models.interface_of(family, config)
  args = (tokens, tokens) if interface == "encdec" else (tokens,)
  rngs = {"params": jax.random.key(0), "dropout": jax.random.key(1)}
  return _unbox(jax.eval_shape(model.init, rngs, *args)["params"])


def fresh_value(path: str, shape: tuple[int, ...],
                rng: np.random.Generator) -> np.ndarray:
  """The zoo's init of one param, by its path (no model init needed).

  Norm scales are ones, biases and adapter up-projections zeros (so an
  added adapter is the identity), other weights normal(0, 0.02).
  """
  leaf = path.rsplit("/", 1)[-1]
  if leaf == "scale":
    return np.ones(shape, np.float32)
  if leaf == "bias" or ("adapter" in path and "/up/" in path):
    return np.zeros(shape, np.float32)
  std = 1e-3 if "adapter" in path else 0.02
  return (rng.standard_normal(shape) * std).astype(np.float32)


def _unbox(tree):
  return jax.tree.map(lambda x: x.unbox() if hasattr(x, "unbox") else x,
                      tree, is_leaf=lambda x: hasattr(x, "unbox"))


def flat(tree: Params, prefix: str = "") -> dict[str, Any]:
  """A nested dict as {"a/b/leaf": value}."""
  out = {}
  for k, v in tree.items():
    if isinstance(v, dict):
      out.update(flat(v, f"{prefix}{k}/"))
    else:
      out[prefix + k] = v
  return out


def _unflat(flat: dict[str, Any]) -> Params:
  out: Params = {}
  for path, v in flat.items():
    node = out
    *parents, leaf = path.split("/")
    for p in parents:
      node = node.setdefault(p, {})
    node[leaf] = v
  return out


def check_and_fill(family: str, config, params: Params) -> Params:
  """Checks converted params against Model.init; fills what is missing.

  A head the checkpoint lacks (an MLM head on a bare encoder, a pooler on
  an MLM model) takes its fresh init, with a log line naming it.

  Raises:
    ValueError: on a param the model does not have or a shape mismatch.
  """
  shapes = param_shapes(family, config)
  want, have = flat(shapes), flat(params)
  extra = sorted(set(have) - set(want))
  if extra:
    raise ValueError(f"converted params not in the {family} model: {extra}")
  bad = [f"{k}: checkpoint {np.shape(have[k])} vs model {want[k].shape}"
         for k in have if tuple(np.shape(have[k])) != tuple(want[k].shape)]
  if bad:
    raise ValueError(f"shape mismatch converting {family}: {bad}")
  missing = sorted(set(want) - set(have))
  if missing:
    logging.info("checkpoint lacks %s; using fresh init", missing)
    rng = np.random.default_rng(0)
    have = dict(have, **{k: fresh_value(k, want[k].shape, rng)
                         for k in missing})
  return _unflat(have)


def hf_name(table: dict[str, str], zoo_name: str, what: str) -> str:
  """The first Hugging Face name that `table` (HF -> zoo) maps to `zoo_name`.

  Raises:
    ValueError: no Hugging Face name gives `zoo_name`.
  """
  for hf, zoo in table.items():
    if zoo == zoo_name:
      return hf
  raise ValueError(f"{what} {zoo_name!r} has no Hugging Face equivalent; "
                   f"exportable: {sorted(set(table.values()))}")


def warn_unused(r: Reader, family: str) -> None:
  """Logs checkpoint tensors a converter did not use (other heads)."""
  left = r.unused()
  if left:
    logging.warning("%s conversion ignored %d tensors: %s", family,
                    len(left), left[:10])
