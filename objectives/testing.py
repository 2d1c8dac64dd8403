"""Checks every scheme's tests share: init loss, finite gradients, overfit.

Kept tiny so the whole family trains in seconds on a laptop CPU: one small
synthetic batch, the family's `tiny` size, one jitted Adam step.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax

import objectives
from objectives import common
from data.synthetic import SyntheticLoader

VOCAB = 512
SPECIALS = objectives.Specials(vocab_size=VOCAB)


def tiny_batch(seq_len=48, batch_size=4, seed=0):
  """A fixed synthetic batch of the contract, int32 jnp arrays."""
  b = next(SyntheticLoader(seq_len=seq_len, batch_size=batch_size,
                           seed=seed, vocab_size=VOCAB))
  return {k: jnp.asarray(v) for k, v in b.items()}


def build(name, model, **options):
  """The scheme bound to the family's tiny size, dropout off."""
  args = dict(options.pop("model_args", {}))
  args.setdefault("dropout_rate", 0.0)
  args.setdefault("num_layers", 1)  # compile time dominates these tests
  if "attention_dropout_rate" in common.config_fields(model):
    args.setdefault("attention_dropout_rate", 0.0)
  return objectives.build(name, model, "tiny", SPECIALS, model_args=args,
                          **options)


def assert_near_uniform(loss, tolerance=0.6, vocab=VOCAB):
  """Token loss at init is about log(V): the model starts uninformed."""
  assert abs(loss - math.log(vocab)) < tolerance, (loss, math.log(vocab))


def train(obj, batch, steps=30, lr=1e-2, rng=jax.random.key(1)):
  """Adam on one batch with one fixed rng (so one fixed corruption).

  Returns:
    dict: `first` loss (at init), `metrics` at init (floats), `last` (the
    best of the last three losses), `finite` (every gradient finite).
  """
  params = common.nn.meta.unbox(jax.jit(obj.init)(jax.random.key(0), batch))
  tx = optax.adam(lr)
  state = tx.init(params)

  @jax.jit
  def step(p, s):
    (loss, metrics), g = jax.value_and_grad(obj.loss, has_aux=True)(
        p, batch, rng, True)
    finite = jnp.all(jnp.stack([jnp.isfinite(x).all()
                                for x in jax.tree.leaves(g)]))
    u, s = tx.update(g, s, p)
    return optax.apply_updates(p, u), s, loss, metrics, finite

  losses, ok, first_metrics = [], True, None
  for _ in range(steps):
    params, state, loss, metrics, finite = step(params, state)
    losses.append(float(loss))
    first_metrics = first_metrics or jax.tree.map(float, metrics)
    ok &= bool(finite)
  assert np.isfinite(losses).all(), losses
  return {"first": losses[0], "metrics": first_metrics,
          "last": min(losses[-3:]), "finite": ok}


def check(obj, batch, steps=30, lr=1e-2, uniform=True):
  """The shared checks; returns `train`'s dict for scheme-specific ones.

  Loss at init near log(V) (when `uniform`), finite gradients, and the loss
  at least halves on a fixed batch.
  """
  out = train(obj, batch, steps, lr)
  if uniform:
    assert_near_uniform(out["first"])
  assert out["finite"], "non-finite gradient"
  assert out["last"] < 0.5 * out["first"], (out["first"], out["last"])
  return out
