"""TransE (Bordes et al. 2013): a relation is a translation of entities.

A triple (h, r, t) is plausible when e_h + w_r is near e_t. The loss is
the paper's margin ranking loss between each training triple and a
corrupted one (its head or its tail replaced by a random entity, either
with probability 1/2, the paper's "unif"):

  L = mean over pairs of max(0, margin + d(h + r, t) - d(h' + r, t'))

with d the L1 or L2 distance. The paper renormalises each entity vector
to unit L2 norm before every minibatch (`normalize`); relations are not.
All of it is jnp, so it runs inside jit.

Letters: N triples, K entities, R relations, D dim.
"""

import jax
import jax.numpy as jnp


def distance(entities, relations, triples, norm: int = 1) -> jax.Array:
  """d(e_h + w_r, e_t) per triple.

  Args:
    entities: float [K, D]; relations: float [R, D].
    triples: int32 [N, 3] (head, relation, tail).
    norm: 1 (L1) or 2 (L2).

  Returns:
    float32 [N].
  """
  if norm not in (1, 2):
    raise ValueError(f"TransE's distance is L1 or L2; got norm {norm}")
  diff = (entities[triples[:, 0]] + relations[triples[:, 1]]
          - entities[triples[:, 2]]).astype(jnp.float32)
  if norm == 1:
    return jnp.abs(diff).sum(-1)
  return jnp.sqrt(jnp.square(diff).sum(-1))


def corrupt(rng, triples, num_entities: int) -> jax.Array:
  """int32 [N, 3]: each triple with its head or its tail (1/2 each)
  replaced by an entity drawn uniformly. The draw may equal the true
  entity (the paper does not filter either)."""
  which, draw = jax.random.split(rng)
  tail = jax.random.bernoulli(which, 0.5, triples.shape[:1])
  other = jax.random.randint(draw, triples.shape[:1], 0, num_entities,
                             triples.dtype)
  heads = jnp.where(tail, triples[:, 0], other)
  tails = jnp.where(tail, other, triples[:, 2])
  return jnp.stack([heads, triples[:, 1], tails], axis=1)


def margin_loss(entities, relations, positive, negative, margin: float = 1.0,
                norm: int = 1) -> jax.Array:
  """Mean hinge max(0, margin + d(positive) - d(negative)), float32 []
  (`positive`, `negative`: int32 [N, 3], paired row by row)."""
  gap = (margin + distance(entities, relations, positive, norm)
         - distance(entities, relations, negative, norm))
  return jnp.maximum(gap, 0.0).mean()


def normalize(entities) -> jax.Array:
  """Entity vectors [K, D] at unit L2 norm."""
  norms = jnp.linalg.norm(entities.astype(jnp.float32), axis=-1,
                          keepdims=True)
  return entities / jnp.maximum(norms, 1e-12)
