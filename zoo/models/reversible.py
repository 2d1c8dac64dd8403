"""Reversible residual stacks (RevNet; Gomez et al. 2017), as Reformer.

Each layer holds two residual functions and two streams:

    y1 = x1 + f(x2)        x2 = y2 - g(y1)
    y2 = x2 + g(y1)        x1 = y1 - f(x2)

so a layer's inputs follow from its outputs. `stack` runs L layers under a
`jax.custom_vjp` whose forward keeps only the last layer's two outputs;
the backward pass walks the layers in reverse, recomputing each layer's
inputs from its outputs and f, g's activations (one layer's at a time)
for their vector-Jacobian products. Activation memory is then that of one
layer, whatever L.

Everything here is a pure function of explicit params: f and g are
`(params, x, aux, key) -> [B, T, D]` (a flax module's `apply`), `aux`
what every layer reads unchanged (masks, rotations; no gradient), and
`key` a pytree of jax random keys or None. Layer j of a unit reads
`key` folded with 2j (f) and 2j + 1 (g), so the recomputation in the
backward pass draws the same dropout masks and hash rotations as the
forward did.

Layers are grouped in units: a unit is one period of the layer pattern
(e.g. a local-attention layer and an LSH one), its params a dict layer
name -> {"attention": f's, "feed_forward": g's}. Unrolled stacks take a
list of U unit trees; scanned ones one tree stacked on a leading U axis,
run by `jax.lax.scan` both ways.

Letters: B batch, T length, D embed, L layers, U units, P layers a unit.
"""

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax.custom_derivatives import CustomVJPPrimal, SymbolicZero

Array = jax.Array
F_PARAMS, G_PARAMS = "attention", "feed_forward"


class RevLayer(NamedTuple):
  """One reversible layer: its name in the unit's params, f and g."""
  name: str
  f: Callable[[Any, Array, Any, Any], Array]
  g: Callable[[Any, Array, Any, Any], Array]


def _layer_keys(key, j: int):
  """(f's key, g's key) of layer j of a unit, or (None, None)."""
  if key is None:
    return None, None
  fold = lambda i: jax.tree.map(lambda k: jax.random.fold_in(k, i), key)
  return fold(2 * j), fold(2 * j + 1)


def unit_forward(layers, params, x1: Array, x2: Array, aux, key):
  """One unit's P layers: (y1, y2, hs [P, B, T, D] each layer's y2)."""
  hs = []
  for j, layer in enumerate(layers):
    k_f, k_g = _layer_keys(key, j)
    p = params[layer.name]
    x1 = x1 + layer.f(p[F_PARAMS], x2, aux, k_f)
    x2 = x2 + layer.g(p[G_PARAMS], x1, aux, k_g)
    hs.append(x2)
  return x1, x2, jnp.stack(hs)


def unit_backward(layers, params, y1, y2, dy1, dy2, dhs, aux, key):
  """One unit backwards: its inputs recomputed from its outputs.

  Args:
    layers: the unit's `RevLayer`s.
    params: the unit's params.
    y1, y2: [B, T, D] the unit's outputs.
    dy1, dy2: [B, T, D] their cotangents.
    dhs: [P, B, T, D] cotangents of each layer's y2 output, or None.
    aux: as in the forward.
    key: the unit's key pytree, or None.

  Returns:
    (x1, x2, dx1, dx2, param cotangents shaped like `params`).
  """
  grads = {}
  for j in reversed(range(len(layers))):
    layer, (k_f, k_g) = layers[j], _layer_keys(key, j)
    p = params[layer.name]
    if dhs is not None:
      dy2 = dy2 + dhs[j]
    g_out, g_vjp = jax.vjp(lambda q, y: layer.g(q, y, aux, k_g),
                           p[G_PARAMS], y1)
    d_g, dy1_g = g_vjp(dy2)
    x2, dy1 = y2 - g_out, dy1 + dy1_g
    f_out, f_vjp = jax.vjp(lambda q, x: layer.f(q, x, aux, k_f),
                           p[F_PARAMS], x2)
    d_f, dx2_f = f_vjp(dy1)
    y1, y2, dy2 = y1 - f_out, x2, dy2 + dx2_f
    grads[layer.name] = {F_PARAMS: d_f, G_PARAMS: d_g}
  return y1, y2, dy1, dy2, grads


def _unit_keys(keys, u: int):
  return None if keys is None else jax.tree.map(lambda k: k[u], keys)


def forward(layers, scanned: bool, params, x: Array, aux, keys):
  """The stack by plain autodiff-able code (see `stack`)."""
  if scanned:
    def body(carry, xs):
      y1, y2, hs = unit_forward(layers, xs[0], *carry, aux, xs[1])
      return (y1, y2), hs
    (y1, y2), hs = jax.lax.scan(body, (x, x), (params, keys))
    return y1, y2, hs.reshape((-1,) + hs.shape[2:])
  x1, x2, hs = x, x, []
  for u, p in enumerate(params):
    x1, x2, h = unit_forward(layers, p, x1, x2, aux, _unit_keys(keys, u))
    hs.append(h)
  return x1, x2, jnp.concatenate(hs)


def _backward(layers, scanned, params, y1, y2, cts, aux, keys):
  """(param cotangents, x cotangent) of the stack from its outputs."""
  dy1, dy2, dhs = cts
  p_len = len(layers)
  if scanned:
    if dhs is not None:
      dhs = dhs.reshape((-1, p_len) + dhs.shape[1:])

    def body(carry, xs):
      p, k, dh = xs
      *carry, grads = unit_backward(layers, p, *carry, dh, aux, k)
      return tuple(carry), grads
    (_, _, dx1, dx2), grads = jax.lax.scan(
        body, (y1, y2, dy1, dy2), (params, keys, dhs), reverse=True)
    return grads, dx1 + dx2
  grads = [None] * len(params)
  for u in reversed(range(len(params))):
    dh = None if dhs is None else dhs[u * p_len:(u + 1) * p_len]
    y1, y2, dy1, dy2, grads[u] = unit_backward(
        layers, params[u], y1, y2, dy1, dy2, dh, aux, _unit_keys(keys, u))
  return type(params)(grads), dy1 + dy2


def _value(tree):
  return jax.tree.map(lambda a: a.value, tree,
                      is_leaf=lambda a: isinstance(a, CustomVJPPrimal))


def _dense(ct, like):
  return jnp.zeros(like.shape, like.dtype) if isinstance(
      ct, SymbolicZero) else ct


def _reversible(layers, scanned):
  """The custom_vjp stack of one static layer list."""

  @jax.custom_vjp
  def run(params, x, aux, keys):
    return forward(layers, scanned, params, x, aux, keys)

  def fwd(params, x, aux, keys):
    params, x, aux, keys = _value((params, x, aux, keys))
    y1, y2, hs = forward(layers, scanned, params, x, aux, keys)
    return (y1, y2, hs), (params, y1, y2, aux, keys)

  def bwd(res, cts):
    params, y1, y2, aux, keys = res
    dhs = None if isinstance(cts[2], SymbolicZero) else cts[2]
    cts = (_dense(cts[0], y1), _dense(cts[1], y2), dhs)
    grads, dx = _backward(layers, scanned, params, y1, y2, cts, aux, keys)
    return grads, dx, None, None

  run.defvjp(fwd, bwd, symbolic_zeros=True)
  return run


def stack(layers: tuple[RevLayer, ...], params, x: Array, aux=None,
          keys=None, *, scanned: bool = False, reversible: bool = True):
  """L = U * P reversible layers on x (both streams start at x).

  Args:
    layers: the P `RevLayer`s of a unit.
    params: a list of U unit param trees, or (scanned) one tree stacked on
      a leading U axis.
    x: [B, T, D] float32.
    aux: a pytree every layer reads (no gradient flows into it).
    keys: a pytree of key arrays with a leading U axis, or None.
    scanned: run the units by `jax.lax.scan` (params stacked).
    reversible: False differentiates the same forward by plain autodiff
      (every layer's activations kept), e.g. to check the custom one.

  Returns:
    (y1, y2, hs): the two streams' final [B, T, D] and every layer's y2
    stacked [L, B, T, D] (float32).
  """
  if not reversible:
    return forward(layers, scanned, params, x, aux, keys)
  return _reversible(layers, scanned)(params, x, aux, keys)
