"""Transformer blocks and layer stacks, built from `zoo.models.layers`.

One `Block` covers every family: post-LN (BERT, BART) or pre-LN (GPT-2,
T5), LayerNorm or RMSNorm, optional cross-attention (decoders of
encoder-decoders), optional bottleneck adapters, optional projected
attention layers (PALs, Stickland & Murray 2019: beside each layer's
self-attention, `V^D MHA(V^E h)` in a small width d_s, V^E [D, d_s] and
V^D [d_s, D] one pair for the whole stack). `Stack` runs L blocks as a
Python loop or as one `nn.scan` (params then stacked on a leading `layers`
axis), optionally rematerialised, and constrains activations to
("batch", "length", "embed") at every block boundary.

Param names of a block: `attention`, `attention_norm`, `cross_attention`,
`cross_attention_norm`, `mlp`, `mlp_norm`, `adapter_attention`,
`adapter_mlp` (adapters only when `adapter_dim > 0`), `pal_attention`
(`pal_dim > 0`). In a stack: `layer_<i>` unrolled, `layers` scanned,
`layer` shared (ALBERT), and the PALs' shared `pal_encoder` [D, d_s] and
`pal_decoder` [d_s, D].
"""

import dataclasses
import re
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from zoo.models import dense
from zoo.models import layers
from zoo.models.barrier import grad_barrier

Array = jax.Array
ACTIVATION_AXES = ("batch", "length", "embed")

# Rematerialisation policies of a Config's `remat`: what the backward pass
# keeps of each block's forward ("none": everything, no recomputation;
# "dots": the matmul outputs without a batch dimension, i.e. recompute the
# elementwise work; "full": only the block's input, recompute it all).
# True and False stand for "full" and "none".
REMAT = ("none", "dots", "full")


def remat_policy(value) -> str:
  """A Config's `remat` (a name of REMAT, or a bool) as a REMAT name."""
  if isinstance(value, bool):
    return "full" if value else "none"
  if value not in REMAT:
    raise ValueError(f"remat must be one of {REMAT} (or a bool), got "
                     f"{value!r}")
  return value


def rematted(block_cls, value, static_argnums=(7,)):
  """`block_cls`, recomputed in the backward pass as `value` says
  (`static_argnums`: `Block`'s `deterministic`; none for a family layer
  that takes it as a field)."""
  name = remat_policy(value)
  if name == "none":
    return block_cls
  policy = (jax.checkpoint_policies.dots_with_no_batch_dims_saveable
            if name == "dots" else None)
  return nn.remat(block_cls, static_argnums=static_argnums, policy=policy)


@dataclasses.dataclass(frozen=True)
class BlockConfig:
  """Hyper-parameters of one transformer block (hashable, static)."""
  num_heads: int  # N
  head_dim: int  # H
  mlp_dim: int  # F
  activation: str = "gelu"  # see layers.ACTIVATIONS; "gated_*" for T5 v1.1
  pre_norm: bool = False  # pre-LN (GPT-2, T5) or post-LN (BERT, BART)
  norm: str = "layernorm"  # "layernorm" | "rmsnorm"
  norm_eps: float = 1e-12
  use_bias: bool = True  # biases in attention and MLP projections
  attention_scale: float | None = None  # None = 1/sqrt(H); T5 uses 1.0
  cross_attention: bool = False  # decoder block of an encoder-decoder
  dropout_rate: float = 0.1  # on each sub-layer output before the residual
  attention_dropout_rate: float = 0.1  # on attention probabilities
  mlp_dropout_rate: float = 0.0  # on the MLP hidden activations (T5)
  adapter_dim: int = 0  # >0: bottleneck adapters after attention and MLP
  pal_dim: int = 0  # d_s > 0: a projected attention layer beside attention
  pal_heads: int = 0  # heads of the PAL's attention; 0: num_heads
  dtype: str = "float32"  # compute dtype name
  attention_impl: str = "auto"  # see layers.attention
  fan_in_init: bool = False  # T5's kernels (layers.fan_in_init); else N(0, .02)


class Block(nn.Module):
  """One transformer layer.

  Attributes:
    config: a `BlockConfig`.
  """
  config: BlockConfig

  def _sublayer(self, x, fn, name, adapter, deterministic):
    """Residual around fn, with the norm before (pre) or after (post)."""
    c = self.config
    norm = layers.make_norm(c.norm, c.norm_eps, name=f"{name}_norm")
    h = fn(norm(x) if c.pre_norm else x)
    h = layers.Dropout(c.dropout_rate)(h, deterministic=deterministic)
    if c.adapter_dim:
      h = layers.Adapter(c.adapter_dim, c.dtype, name=adapter)(h)
    return x + h if c.pre_norm else norm(x + h)

  def _attention(self, name):
    c = self.config
    return layers.MultiHeadAttention(
        c.num_heads, c.head_dim, dtype=c.dtype, use_bias=c.use_bias,
        scale=c.attention_scale, dropout_rate=c.attention_dropout_rate,
        impl=c.attention_impl, fan_in=c.fan_in_init, name=name)

  def _pal(self, pal, mask, deterministic):
    """The PAL beside self-attention: h [B,T,D] -> V^D MHA(V^E h) [B,T,D]."""
    c = self.config
    heads = c.pal_heads or c.num_heads
    if c.pal_dim % heads:
      raise ValueError(f"pal_dim {c.pal_dim} is not divisible by the PAL's "
                       f"{heads} heads")
    if pal is None:
      raise ValueError("a block with pal_dim > 0 needs the stack's shared "
                       "(pal_encoder, pal_decoder)")
    attn = layers.MultiHeadAttention(
        heads, c.pal_dim // heads, dtype=c.dtype, use_bias=c.use_bias,
        dropout_rate=c.attention_dropout_rate, impl=c.attention_impl,
        name="pal_attention")
    encoder, decoder = pal
    def fn(h):
      small = jnp.einsum("btd,de->bte", h, encoder.astype(h.dtype))
      small = attn(small, mask=mask, deterministic=deterministic)
      return jnp.einsum("bte,ed->btd", small, decoder.astype(h.dtype))
    return fn

  @nn.compact
  def __call__(self, x: Array, mask: Array | None = None,
               bias: Array | None = None, encoded: Array | None = None,
               cross_mask: Array | None = None,
               cross_bias: Array | None = None,
               deterministic: bool = True, pal=None) -> Array:
    """One layer.

    Args:
      x: [B, T, D] float32.
      mask: [B|1, T, T] bool self-attention mask.
      bias: [B|1, N, T, T] additive self-attention bias (relative positions).
      encoded: [B, S, D] encoder output (cross-attention blocks only).
      cross_mask: [B|1, T, S] bool cross-attention mask.
      cross_bias: [B|1, N, T, S] additive cross-attention bias.
      deterministic: no dropout when True.
      pal: with `pal_dim > 0`, the stack's shared (V^E [D, d_s],
        V^D [d_s, D]).

    Returns:
      [B, T, D] float32.
    """
    c = self.config
    attn = self._attention("attention")
    self_attention = lambda h: attn(h, mask=mask, bias=bias,
                                    deterministic=deterministic)
    if c.pal_dim:
      beside = self._pal(pal, mask, deterministic)
      attend = lambda h: self_attention(h) + beside(h)
    else:
      attend = self_attention
    x = self._sublayer(x, attend, "attention", "adapter_attention",
                       deterministic)
    if c.cross_attention:
      if encoded is None:
        raise ValueError("a cross-attention block needs `encoded` [B, S, D]")
      cross = self._attention("cross_attention")
      x = self._sublayer(
          x, lambda h: cross(h, encoded, mask=cross_mask, bias=cross_bias,
                             deterministic=deterministic),
          "cross_attention", "adapter_cross_attention", deterministic)
    mlp = layers.Mlp(c.mlp_dim, c.activation, use_bias=c.use_bias,
                     dropout_rate=c.mlp_dropout_rate, dtype=c.dtype,
                     fan_in=c.fan_in_init, name="mlp")
    return self._sublayer(x, lambda h: mlp(h, deterministic), "mlp",
                          "adapter_mlp", deterministic)


# Collections a scanned stack keeps per layer (stacked on axis 0): the
# params, int8 quantisation's ranges and scales (`zoo.compress.quant`) and
# sown intermediates (attention scores, for distillation).
SCANNED_COLLECTIONS = ("params", "quant_stats", "quant_scales",
                       "intermediates")


class _ScanBody(nn.Module):
  """Block as a scan body: carry in, (carry, per-layer output) out."""
  config: BlockConfig
  deterministic: bool
  remat: bool | str

  @nn.compact
  def __call__(self, x, mask, bias, encoded, cross_mask, cross_bias, pal):
    block = rematted(Block, self.remat)
    y = block(self.config, name="block")(x, mask, bias, encoded, cross_mask,
                                         cross_bias, self.deterministic, pal)
    y = nn.with_logical_constraint(y, ACTIVATION_AXES)
    return y, y


class Stack(nn.Module):
  """L blocks applied in turn; returns the final and every layer's states.

  Attributes:
    config: the `BlockConfig` of every layer.
    num_layers: L.
    scan: one `nn.scan` over layers (params stacked on axis 0, `layers`).
    remat: what the backward pass recomputes of each block (`REMAT`).
    shared: one block's params applied L times (ALBERT).
  """
  config: BlockConfig
  num_layers: int
  scan: bool = False
  remat: bool | str = "none"
  shared: bool = False

  @nn.compact
  def __call__(self, x: Array, mask: Array | None = None,
               bias: Array | None = None, encoded: Array | None = None,
               cross_mask: Array | None = None,
               cross_bias: Array | None = None,
               deterministic: bool = True) -> tuple[Array, tuple[Array, ...]]:
    """x [B, T, D] -> (final [B, T, D], tuple of L [B, T, D] layer outputs).

    Masks and biases as in `Block.__call__`.
    """
    args = (mask, bias, encoded, cross_mask, cross_bias,
            self._pal_pair(x.shape[-1]))
    x = nn.with_logical_constraint(x, ACTIVATION_AXES)
    if self.scan and not self.shared:
      return self._scanned(x, args, deterministic)
    block_cls = rematted(Block, self.remat)
    shared = block_cls(self.config, name="layer") if self.shared else None
    outs = []
    for i in range(self.num_layers):
      block = shared or block_cls(self.config, name=f"layer_{i}")
      x = block(x, *args[:-1], deterministic, args[-1])
      x = grad_barrier(nn.with_logical_constraint(x, ACTIVATION_AXES))
      outs.append(x)
    return x, tuple(outs)

  def _pal_pair(self, width: int):
    """The PALs' V^E [D, d_s] and V^D [d_s, D], one pair for every layer
    (V^D starts at zero: an added PAL leaves the network as it was); None
    without PALs."""
    c = self.config
    if not c.pal_dim:
      return None
    encoder = dense.param_with_axes(self, "pal_encoder", layers.default_init,
                                    (width, c.pal_dim), ("embed", "pal"))
    decoder = dense.param_with_axes(self, "pal_decoder",
                                    nn.initializers.zeros,
                                    (c.pal_dim, width), ("pal", "embed"))
    return encoder, decoder

  def _scanned(self, x, args, deterministic):
    scanned = nn.scan(
        _ScanBody, variable_axes={c: 0 for c in SCANNED_COLLECTIONS},
        split_rngs={"params": True, "dropout": True},
        in_axes=(nn.broadcast,) * len(args), length=self.num_layers,
        metadata_params={nn.PARTITION_NAME: "layers"})
    x, ys = scanned(self.config, deterministic, self.remat,
                    name="layers")(x, *args)
    return x, tuple(ys[i] for i in range(self.num_layers))


def stack_layer_params(per_layer: list[dict]) -> dict:
  """Unrolled per-layer param trees -> one tree stacked on axis 0 (scan).

  Args:
    per_layer: L trees of identical structure (the `layer_<i>` subtrees).

  Returns:
    The `layers` subtree of a scanned `Stack`: `{"block": stacked}`.
  """
  return {"block": jax.tree.map(lambda *xs: jnp.stack(xs), *per_layer)}


def _layer_keys(tree: dict) -> list[str]:
  """`layer_<i>` keys of a tree, in layer order."""
  return sorted((k for k in tree if re.fullmatch(r"layer_\d+", k)),
                key=lambda k: int(k[6:]))


def restack(params: dict) -> dict:
  """Every `layer_0..layer_{L-1}` group -> one scanned `layers` subtree
  (the layout of a `Stack` or `LayerStack` with `scan=True`)."""
  if not isinstance(params, dict):
    return params
  keys = _layer_keys(params)
  out = {k: restack(v) for k, v in params.items() if k not in keys}
  if keys:
    out["layers"] = stack_layer_params([restack(params[k]) for k in keys])
  return out


def unstack(params: dict) -> dict:
  """Inverse of `restack`: every scanned `layers/block` -> `layer_<i>`."""
  if not isinstance(params, dict):
    return params
  out = {k: unstack(v) for k, v in params.items() if k != "layers"}
  per = _per_layer({"layers": params["layers"]}) if "layers" in params else (
      None)
  if per is not None:
    out.update({f"layer_{i}": unstack(p) for i, p in enumerate(per)})
  elif "layers" in params:
    out["layers"] = unstack(params["layers"])
  return out


def _per_layer(tree: dict) -> list[dict] | None:
  """The L per-layer param trees of a stack's subtree (`layer_<i>` keys, or
  a scanned `layers/block` stacked on axis 0); None if it holds no stack."""
  keys = _layer_keys(tree)
  if keys:
    return [tree[k] for k in keys]
  block = tree.get("layers")
  if isinstance(block, dict) and set(block) == {"block"}:
    stacked = block["block"]
    count = jax.tree.leaves(stacked)[0].shape[0]
    return [jax.tree.map(lambda x, i=i: x[i], stacked) for i in range(count)]
  return None


def take_layers(params: dict, keep: list[int], scanned: bool) -> dict:
  """A model's params with only the stack layers `keep`, renumbered.

  Args:
    params: a model's param tree, its stacks unrolled or scanned (the
      layouts of `Stack` and `LayerStack`).
    keep: indices of the layers kept, in order (DistilBERT's student keeps
      every other layer of its teacher).
    scanned: the layout of the result's stacks.

  Returns:
    The tree with every stack cut to `len(keep)` layers; the rest as it was.
  """
  if not isinstance(params, dict):
    return params
  layers_ = _per_layer(params)
  if layers_ is None:
    return {k: take_layers(v, keep, scanned) for k, v in params.items()}
  stack_keys = ["layers"] + _layer_keys(params)
  out = {k: take_layers(v, keep, scanned) for k, v in params.items()
         if k not in stack_keys}
  chosen = [layers_[i] for i in keep]
  if scanned:
    out["layers"] = stack_layer_params(chosen)
  else:
    out.update({f"layer_{i}": p for i, p in enumerate(chosen)})
  return out


def first_stack(params: dict) -> list[dict]:
  """The per-layer param trees of the first stack in a model's params.

  Raises:
    ValueError: the tree holds no stack.
  """
  todo = [params]
  while todo:
    tree = todo.pop(0)
    found = _per_layer(tree)
    if found is not None:
      return found
    todo += [v for v in tree.values() if isinstance(v, dict)]
  raise ValueError("the params hold no layer stack (layer_<i> or "
                   "layers/block)")


def is_scanned(params: dict) -> bool:
  """Whether a param tree holds a scanned stack (`layers/block`)."""
  if not isinstance(params, dict):
    return False
  block = params.get("layers")
  if isinstance(block, dict) and set(block) == {"block"}:
    return True
  return any(is_scanned(v) for v in params.values())


def is_unrolled(params: dict) -> bool:
  """Whether a param tree holds an unrolled stack (`layer_<i>` groups)."""
  if not isinstance(params, dict):
    return False
  return bool(_layer_keys(params)) or any(
      is_unrolled(v) for v in params.values())


def sown_scores(intermediates) -> list[Array]:
  """Each self-attention layer's sown `attention_scores`, in layer order.

  Args:
    intermediates: the "intermediates" collection of a model applied with
      it mutable (`layers.MultiHeadAttention` sows "scores").

  Returns:
    L arrays [B, N, T, S] float32: unrolled (`layer_<i>`), scanned (split
    from the stacked axis) or shared (ALBERT: one sow per application).
  """
  found = []
  for path, leaf in jax.tree_util.tree_flatten_with_path(intermediates)[0]:
    keys = [getattr(p, "key", getattr(p, "idx", None)) for p in path]
    if "scores" not in keys or "cross_attention" in keys:
      continue
    layer = next((int(k[6:]) for k in keys if isinstance(k, str)
                  and re.fullmatch(r"layer_\d+", k)), 0)
    call = keys[-1] if isinstance(keys[-1], int) else 0
    if "layers" in keys:  # scanned: one stacked leaf
      found += [((layer, call, i), leaf[i]) for i in range(leaf.shape[0])]
    else:
      found.append(((layer, call, 0), leaf))
  return [x for _, x in sorted(found, key=lambda item: item[0])]


class _LayerScanBody(nn.Module):
  """A family layer as a scan body: x carried, the other inputs broadcast."""
  layer: Any
  config: Any
  deterministic: bool

  @nn.compact
  def __call__(self, x, *args):
    layer = rematted(self.layer, self.config.remat, static_argnums=())
    y = layer(self.config, self.deterministic, name="block")(x, *args)
    y = nn.with_logical_constraint(y, ACTIVATION_AXES)
    return y, y


class LayerStack(nn.Module):
  """L layers of a family's own kind, unrolled (`layer_<i>`) or as one
  scan (`layers/block`, params stacked on axis 0), as `config.scan_layers`
  and `config.remat` say. A layer is `layer(config, deterministic)(x,
  *args) -> x`; `args` (masks, a context) reach every layer unchanged.

  Attributes:
    layer: the layer's Module class.
    config: the family config (`num_layers`, `scan_layers`, `remat`).
  """
  layer: Any
  config: Any

  @nn.compact
  def __call__(self, x: Array, *args,
               deterministic: bool = True) -> tuple[Array, ...]:
    """x [B, T, D] -> L layer outputs [B, T, D] float32."""
    c = self.config
    x = nn.with_logical_constraint(x, ACTIVATION_AXES)
    if c.scan_layers:
      scan = nn.scan(
          _LayerScanBody, variable_axes={"params": 0},
          split_rngs={"params": True, "dropout": True},
          in_axes=(nn.broadcast,) * len(args), length=c.num_layers,
          metadata_params={nn.PARTITION_NAME: "layers"})
      _, ys = scan(self.layer, c, deterministic, name="layers")(x, *args)
      return tuple(ys[i] for i in range(c.num_layers))
    cls, outs = rematted(self.layer, c.remat, static_argnums=()), []
    for i in range(c.num_layers):
      x = cls(c, deterministic, name=f"layer_{i}")(x, *args)
      x = grad_barrier(nn.with_logical_constraint(x, ACTIVATION_AXES))
      outs.append(x)
    return tuple(outs)
