"""Fine-tuning heads that sit on any family's outputs.

Every head reads the states a family returns (`hidden` [B,T,D], or the
`layers` tuple for a scalar mix) and a padding mask [B,T] bool (True = real
token), and is a linen Module whose params carry logical axis names, so a
fine-tuning model is just `backbone` + `head` under one params tree.
`adapter_mask` picks the params to train when only adapters and the head
learn (the bottleneck adapters themselves live in the families' blocks,
under param paths containing "adapter").

Letters: B batch, T length, D embed, V vocab, C classes, K tags, L layers.
"""

from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from zoo.models import layers
from zoo.models.lstm import BiLSTM

Array = jax.Array

# Finite stand-in for -inf on masked positions: keeps softmax NaN-free even
# when a row is all padding.
NEG_INF = -1e9


def _padding_mask(hidden, mask):
  """bool [B,T]: the given mask, or all True."""
  if mask is None:
    return jnp.ones(hidden.shape[:2], bool)
  if mask.shape != hidden.shape[:2]:
    raise ValueError(f"mask shape {mask.shape} does not match states "
                     f"{hidden.shape[:2]} (want [B,T] bool)")
  return mask.astype(bool)


def pool(hidden: Array, mask: Array | None = None, kind: str = "cls") -> Array:
  """One vector per sequence.

  Args:
    hidden: [B,T,D] float states.
    mask: [B,T] bool, True on real tokens (None = all real).
    kind: "cls" (the first position), "last" (the last real position:
      XLNet's summary), "mean" (over real tokens only), "max" (over real
      tokens only) or "concat" (ULMFiT's concat pooling: last, max and
      mean side by side).

  Returns:
    [B,D] float32 ([B,3D] for "concat").
  """
  if kind == "cls":
    return hidden[:, 0].astype(jnp.float32)
  if kind == "last":
    real = _padding_mask(hidden, mask)
    t = hidden.shape[1]
    last = t - 1 - jnp.argmax(real[:, ::-1], axis=1)  # all-pad rows: T-1
    return jnp.take_along_axis(hidden, last[:, None, None], 1)[:, 0].astype(
        jnp.float32)
  if kind == "mean":
    keep = _padding_mask(hidden, mask)[..., None].astype(jnp.float32)
    total = jnp.sum(hidden * keep, axis=1)
    return total / jnp.maximum(jnp.sum(keep, axis=1), 1.0)
  if kind == "max":
    real = _padding_mask(hidden, mask)[..., None]
    top = jnp.max(jnp.where(real, hidden.astype(jnp.float32), NEG_INF), 1)
    return jnp.where(jnp.any(real, axis=1), top, 0.0)  # all-pad rows: 0
  if kind == "concat":
    return jnp.concatenate([pool(hidden, mask, k)
                            for k in ("last", "max", "mean")], axis=-1)
  raise ValueError(f"unknown pooling {kind!r}; use 'cls', 'last', 'mean', "
                   "'max' or 'concat'")


def moments(x) -> tuple[np.ndarray, np.ndarray]:
  """Mean and standard deviation over N of features x [N, ...] (float32;
  the std is 1 where a feature is constant, so standardising leaves it
  at 0). The frozen probe's and the fine-tuning heads' standardisation."""
  x = np.asarray(x, np.float32)
  mean = x.mean(0, dtype=np.float64).astype(np.float32)
  std = x.std(0)
  std = np.where(std > 1e-6 * np.maximum(np.abs(mean), 1.0), std, 1.0)
  return mean, std.astype(np.float32)


class Standardize(nn.Module):
  """(x - mean) * scale per feature, with "mean" [D] and "scale" [D]
  params that start at 0 and 1. They are statistics, not weights: the
  fine-tuning run sets them from its training examples' pooled features
  (`moments`; scale = 1 / std) and never trains them."""

  @nn.compact
  def __call__(self, x: Array) -> Array:
    """x [B,D] -> [B,D] float32."""
    d = x.shape[-1]
    mean = layers.param_with_axes(self, "mean", nn.initializers.zeros, (d,),
                                  ("embed",))
    scale = layers.param_with_axes(self, "scale", nn.initializers.ones, (d,),
                                   ("embed",))
    return (x.astype(jnp.float32) - mean) * scale


class SequenceClassifier(nn.Module):
  """Class logits from a pooled sequence.

  Attributes:
    num_classes: C.
    pool: "cls" or "mean" (see `pool`).
    pre_dense: a dense + tanh before the output (BERT's pooler), for
      backbones that return no "pooled".
    dropout_rate: on the pooled vector.
    dtype: compute dtype name.
    standardize: standardise the pooled vector (`Standardize`) first. The
      pooled vector is sown as ("intermediates", "pooled") for the run
      that sets the statistics.
  """
  num_classes: int
  pool: str = "cls"
  pre_dense: bool = False
  dropout_rate: float = 0.1
  dtype: str = "float32"
  standardize: bool = False

  @nn.compact
  def __call__(self, hidden: Array, mask: Array | None = None, *,
               deterministic: bool = True) -> Array:
    """hidden [B,T,D], mask [B,T] bool -> logits [B,C] float32."""
    x = pool(hidden, mask, self.pool)
    if self.standardize:
      self.sow("intermediates", "pooled", x)
      x = Standardize(name="standardize")(x)
    if self.pre_dense:
      x = jnp.tanh(layers.Dense(x.shape[-1], ("embed", "mlp"),
                                dtype=self.dtype, name="pre_dense")(x))
    x = layers.Dropout(self.dropout_rate)(x, deterministic=deterministic)
    return layers.Dense(self.num_classes, ("embed", "classes"),
                        dtype=self.dtype, name="out")(x)


class ConcatPoolClassifier(nn.Module):
  """ULMFiT's classifier (Howard & Ruder 2018, section 3.2): concat pooling
  of the states (last, max, mean: [B,3D]), then two blocks of
  normalisation, dropout and a linear layer, ReLU between them.

  The paper's blocks use batch normalisation; these use layer
  normalisation, which keeps no batch statistics in the state and does not
  depend on the (few-shot: 16-row) batch. Widths and dropouts follow the
  released classifier: a hidden layer of 50, dropout 0.4 on the pooled
  vector and 0.1 before the output.

  Attributes:
    num_classes: C.
    hidden_dim: width of the intermediate layer.
    dropout_rates: (on the pooled vector, before the output).
    dtype: compute dtype name.
  """
  num_classes: int
  hidden_dim: int = 50
  dropout_rates: tuple[float, float] = (0.4, 0.1)
  dtype: str = "float32"

  @nn.compact
  def __call__(self, hidden: Array, mask: Array | None = None, *,
               deterministic: bool = True) -> Array:
    """hidden [B,T,D], mask [B,T] bool -> logits [B,C] float32."""
    x = pool(hidden, mask, "concat")
    widths = (self.hidden_dim, self.num_classes)
    for i, (width, rate) in enumerate(zip(widths, self.dropout_rates)):
      x = layers.LayerNorm(1e-5, name=f"norm_{i}")(x)
      x = layers.Dropout(rate)(x, deterministic=deterministic)
      x = layers.Dense(width, ("mlp", "classes") if i else ("embed", "mlp"),
                       dtype=self.dtype, name=f"dense_{i}")(x)
      if i == 0:
        x = jax.nn.relu(x)
    return x


class Regressor(nn.Module):
  """Real-valued targets (STS-B style) from a pooled sequence.

  Attributes:
    num_outputs: outputs per sequence; 1 gives [B], more give [B,num_outputs].
    pool, pre_dense, dropout_rate, dtype, standardize: as in
      `SequenceClassifier`.
  """
  num_outputs: int = 1
  pool: str = "cls"
  pre_dense: bool = False
  dropout_rate: float = 0.1
  dtype: str = "float32"
  standardize: bool = False

  @nn.compact
  def __call__(self, hidden: Array, mask: Array | None = None, *,
               deterministic: bool = True) -> Array:
    """hidden [B,T,D], mask [B,T] bool -> [B] (or [B,outputs]) float32."""
    out = SequenceClassifier(self.num_outputs, self.pool, self.pre_dense,
                             self.dropout_rate, self.dtype, self.standardize,
                             name="regress")(
                                 hidden, mask, deterministic=deterministic)
    return out[:, 0] if self.num_outputs == 1 else out


class TokenTagger(nn.Module):
  """Per-token tag logits (NER, POS): linear, or a biLSTM then linear.

  Attributes:
    num_tags: K.
    kind: "linear" or "bilstm".
    lstm_dim: cells per direction of the biLSTM.
    dropout_rate: on the features before the output layer.
    dtype: compute dtype name.
  """
  num_tags: int
  kind: str = "linear"
  lstm_dim: int = 128
  dropout_rate: float = 0.1
  dtype: str = "float32"

  @nn.compact
  def __call__(self, hidden: Array, mask: Array | None = None, *,
               deterministic: bool = True) -> Array:
    """hidden [B,T,D], mask [B,T] bool -> logits [B,T,K] float32.

    The biLSTM restarts at every padding boundary, so padding never feeds
    real tokens' states, in either direction.
    """
    x = hidden.astype(jnp.float32)
    if self.kind == "bilstm":
      segments = _padding_mask(hidden, mask).astype(jnp.int32)
      x = BiLSTM(self.lstm_dim, dtype=self.dtype, name="bilstm")(x, segments)
    elif self.kind != "linear":
      raise ValueError(f"unknown tagger kind {self.kind!r}; use 'linear' or "
                       "'bilstm'")
    x = layers.Dropout(self.dropout_rate)(x, deterministic=deterministic)
    return layers.Dense(self.num_tags, ("embed", "classes"), dtype=self.dtype,
                        name="out")(x)


class SpanQA(nn.Module):
  """Extractive QA (BERT/SQuAD): start and end vectors against every state.

  Attributes:
    dtype: compute dtype name.
  """
  dtype: str = "float32"

  @nn.compact
  def __call__(self, hidden: Array, mask: Array | None = None
               ) -> dict[str, Array]:
    """Scores every position as the answer's start and end.

    Args:
      hidden: [B,T,D] float states.
      mask: [B,T] bool, True where an answer may lie (padding, and usually
        the question, False).

    Returns:
      "start_logits", "end_logits" [B,T] float32 (masked positions at a
      large negative), "start_log_probs", "end_log_probs" [B,T]: log-softmax
      over positions.
    """
    d = hidden.shape[-1]
    keep = _padding_mask(hidden, mask)
    dtype = layers.compute_dtype(self.dtype)
    out = {}
    for name in ("start", "end"):
      vec = layers.param_with_axes(self, name, layers.default_init, (d,),
                                   ("embed",))
      logits = layers.einsum("btd,d->bt", hidden, vec, dtype)
      logits = jnp.where(keep, logits, NEG_INF)
      out[f"{name}_logits"] = logits
      out[f"{name}_log_probs"] = jax.nn.log_softmax(logits, axis=-1)
    return out


def best_span(start_logits: Array, end_logits: Array,
              max_length: int = 30) -> tuple[Array, Array]:
  """The highest-scoring span with start <= end < start + max_length.

  Args:
    start_logits, end_logits: [B,T] float.
    max_length: longest answer in tokens.

  Returns:
    (start [B] int32, end [B] int32), end inclusive.
  """
  t = start_logits.shape[1]
  scores = start_logits[:, :, None] + end_logits[:, None, :]
  i, j = jnp.arange(t)[:, None], jnp.arange(t)[None, :]
  valid = (j >= i) & (j < i + max_length)
  flat = jnp.where(valid, scores, -jnp.inf).reshape(scores.shape[0], -1)
  best = jnp.argmax(flat, axis=-1)
  return (best // t).astype(jnp.int32), (best % t).astype(jnp.int32)


class ScalarMix(nn.Module):
  """ELMo's task-specific weighting of layers: gamma * sum_l s_l h_l.

  The weights s = softmax(w) start uniform (w = 0); gamma starts at 1.

  Attributes:
    num_layers: how many layers are mixed (L+1 for a family's "layers").
    layer_norm: normalise each layer over its real tokens first.
  """
  num_layers: int
  layer_norm: bool = False

  @nn.compact
  def __call__(self, hiddens: Sequence[Array], mask: Array | None = None
               ) -> Array:
    """hiddens: L tensors [B,T,D]; mask [B,T] bool -> [B,T,D] float32."""
    if len(hiddens) != self.num_layers:
      raise ValueError(f"ScalarMix built for {self.num_layers} layers got "
                       f"{len(hiddens)}")
    w = layers.param_with_axes(self, "weights", nn.initializers.zeros,
                               (self.num_layers,), ("layers",))
    gamma = layers.param_with_axes(self, "gamma", nn.initializers.ones, (),
                                   ())
    s = jax.nn.softmax(w)
    stack = jnp.stack([h.astype(jnp.float32) for h in hiddens])
    if self.layer_norm:
      stack = _masked_layer_norm(stack, _padding_mask(hiddens[0], mask))
    return gamma * jnp.einsum("l,lbtd->btd", s, stack)


def _masked_layer_norm(stack, keep):
  """Each layer [L,B,T,D] normalised by its mean/var over real tokens."""
  keep = keep[None, :, :, None].astype(jnp.float32)
  count = jnp.maximum(keep.sum(axis=(1, 2, 3), keepdims=True)
                      * stack.shape[-1], 1.0)
  mean = (stack * keep).sum(axis=(1, 2, 3), keepdims=True) / count
  var = (jnp.square(stack - mean) * keep).sum(axis=(1, 2, 3),
                                               keepdims=True) / count
  return (stack - mean) * jax.lax.rsqrt(var + 1e-12)


def _path_keys(path) -> list[str]:
  out = []
  for key in path:
    for attr in ("key", "name", "idx"):
      if hasattr(key, attr):
        out.append(str(getattr(key, attr)))
        break
  return out


def adapter_mask(params: Any, train_head: bool = True) -> Any:
  """Which params train when fine-tuning adapters only (for `optax.masked`).

  Args:
    params: a params pytree, boxed (logical axes) or plain.
    train_head: also train params under a path key containing "head".

  Returns:
    A pytree shaped like `nn.meta.unbox(params)` of Python bools: True for
    a param whose path has a key containing "adapter" (or "head").
  """
  def one(path, _):
    keys = [k.lower() for k in _path_keys(path)]
    adapter = any("adapter" in k for k in keys)
    head = train_head and any("head" in k for k in keys)
    return adapter or head

  return jax.tree_util.tree_map_with_path(
      one, params, is_leaf=lambda x: isinstance(x, nn.meta.AxisMetadata))
