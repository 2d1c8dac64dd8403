"""Token cross-entropy through a family's LM head, chunk by chunk.

A causal LM takes logits at every position: [B, T, V] float32, the
largest array of a tiny model's step, written once forward and read
several times by the softmax and backward. `token_sums` here gives
`common.token_sums(head(params, hidden), targets, weights)` without it:
the positions go through the head C at a time (a `lax.scan`), and each
chunk's gradient is formed right after its loss, while its logits are
still in cache (softmax minus the one-hot target, pulled back through the
head by its VJP). The backward pass then only scales the stored gradients
of the hidden states and the head's params by the loss's cotangent. The
FLOPs are those of the plain path; the [B, T, V] passes are gone.

Targets and weights are constants of the loss: no gradient reaches them
(as in `common.token_sums`, where they index and weigh).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import core as jex_core

Array = jax.Array


def token_sums(head, params, hidden: Array, targets: Array, weights: Array,
               chunk: int) -> dict[str, Array]:
  """`common.token_sums` of `head(params, hidden)`, C positions at a time.

  Args:
    head: `(params, [B, C, D]) -> [B, C, V]` logits, differentiable in both.
    params: the pytree `head` reads (gradients reach every leaf it uses).
    hidden: [B, T, D] float, the states the head reads.
    targets: [B, T] int32.
    weights: [B, T] bool or float, 0 where nothing is predicted.
    chunk: C, positions per pass through the head (T is padded up to a
      multiple of C with weight-0 positions).

  Returns:
    dict of float32 scalars `loss_sum`, `weight_sum`, `correct_sum`; only
    `loss_sum` has a gradient.
  """
  if chunk < 1:
    raise ValueError(f"chunk must be a positive number of positions; "
                     f"got {chunk}")
  w = weights.astype(jnp.float32)
  pieces = [_chunked(x, chunk) for x in (hidden, targets, w)]
  head_of_read, read = _reading(head, params, pieces[0][0])
  loss, correct = _sums(head_of_read, read, *pieces)
  return {"loss_sum": loss, "weight_sum": w.sum(),
          "correct_sum": jax.lax.stop_gradient(correct)}


def _reading(head, params, h):
  """`(head over the leaves it reads, those leaves)`: the gradients the
  chunks sum cover only what the head reads (a model's whole param tree
  is passed, and the head reads its embedding table)."""
  leaves, tree = jax.tree.flatten(params)
  jaxpr = jax.make_jaxpr(lambda ls, x: head(tree.unflatten(ls), x))(
      leaves, h).jaxpr
  used = {v for eqn in jaxpr.eqns for v in eqn.invars
          if isinstance(v, jex_core.Var)}
  used |= {v for v in jaxpr.outvars if isinstance(v, jex_core.Var)}
  at = [i for i, v in enumerate(jaxpr.invars[:len(leaves)]) if v in used]
  # The head never reads the other leaves: shapes stand in for them.
  rest = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in leaves]

  def head_of_read(read, x):
    full = list(rest)
    for i, leaf in zip(at, read):
      full[i] = leaf
    return head(tree.unflatten(full), x)

  return head_of_read, [leaves[i] for i in at]


def _chunked(x: Array, c: int) -> Array:
  """[B, T, ...] -> [K, B, C, ...], K = ceil(T / C), zero-padded."""
  b, t = x.shape[:2]
  k = -(-t // c)
  x = jnp.pad(x, [(0, 0), (0, k * c - t)] + [(0, 0)] * (x.ndim - 2))
  return jnp.moveaxis(x.reshape((b, k, c) + x.shape[2:]), 1, 0)


def _chunk_sums(head, params, h, t, w):
  """One chunk's loss and hit sums and their gradients.

  Args: h [B, C, D], t [B, C] int32, w [B, C] float32.

  Returns:
    (loss sum, hit sum, d loss / d params, d loss / d h [B, C, D]).
  """
  logits, pull = jax.vjp(lambda p, x: head(p, x).astype(jnp.float32),
                         params, h)
  top = logits.max(axis=-1)
  ex = jnp.exp(logits - top[..., None])
  total = ex.sum(axis=-1)
  true = jnp.take_along_axis(logits, t[..., None], axis=-1)[..., 0]
  nll = top + jnp.log(total) - true
  probs = ex * (1.0 / total)[..., None]
  d_logits = (probs - jax.nn.one_hot(t, logits.shape[-1],
                                     dtype=probs.dtype)) * w[..., None]
  d_params, d_h = pull(d_logits)
  hits = (true >= top).astype(jnp.float32)
  return (nll * w).sum(), (hits * w).sum(), d_params, d_h


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _sums(head, params, hc, tc, wc):
  """(loss sum, hit sum) over chunks hc [K, B, C, D], tc, wc [K, B, C]."""
  return _sums_fwd(head, params, hc, tc, wc)[0]


def _sums_fwd(head, params, hc, tc, wc):
  def body(carry, chunk):
    loss, hits, d_params = carry
    l, n, dp, dh = _chunk_sums(head, params, *chunk)
    return (loss + l, hits + n, jax.tree.map(jnp.add, d_params, dp)), dh

  zeros = jax.tree.map(jnp.zeros_like, params)
  (loss, hits, d_params), d_hc = jax.lax.scan(
      body, (jnp.float32(0), jnp.float32(0), zeros), (hc, tc, wc))
  return (loss, hits), (d_params, d_hc, tc, wc)


def _sums_bwd(head, residuals, cotangents):
  del head
  d_params, d_hc, tc, wc = residuals
  g = cotangents[0]  # the hit sum has no gradient
  scale = lambda x: (g * x).astype(x.dtype)
  return (jax.tree.map(scale, d_params), scale(d_hc),
          np.zeros(tc.shape, jax.dtypes.float0), jnp.zeros_like(wc))


_sums.defvjp(_sums_fwd, _sums_bwd)
