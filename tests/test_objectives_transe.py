"""objectives.transe: TransE's distance, corruption and margin loss."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from objectives import transe

ENT = np.array([[0.0, 1.0], [1.0, 1.0], [2.0, -1.0]], np.float32)
REL = np.array([[1.0, 0.0], [0.5, 0.5]], np.float32)


def test_distance_by_hand():
  triples = np.array([[0, 0, 1], [1, 1, 2]], np.int32)
  # (0,1)+(1,0)-(1,1) = (0,0); (1,1)+(.5,.5)-(2,-1) = (-.5, 2.5)
  np.testing.assert_allclose(transe.distance(ENT, REL, triples, 1),
                             [0.0, 3.0])
  np.testing.assert_allclose(transe.distance(ENT, REL, triples, 2),
                             [0.0, np.sqrt(0.25 + 6.25)], rtol=1e-6)
  with pytest.raises(ValueError, match="L1 or L2"):
    transe.distance(ENT, REL, triples, 3)


def test_margin_loss_by_hand():
  pos = np.array([[0, 0, 1], [1, 1, 2]], np.int32)
  neg = np.array([[2, 0, 1], [1, 1, 0]], np.int32)
  # L1: d(pos) = 0, 3; d(neg): (2,-1)+(1,0)-(1,1) = (2,-2) -> 4;
  # (1,1)+(.5,.5)-(0,1) = (1.5,.5) -> 2. Hinges at margin 2:
  # max(0, 2 + 0 - 4) = 0, max(0, 2 + 3 - 2) = 3; mean 1.5.
  got = transe.margin_loss(ENT, REL, pos, neg, margin=2.0, norm=1)
  np.testing.assert_allclose(got, 1.5)
  grad = jax.grad(transe.margin_loss)(jnp.asarray(ENT), REL, pos, neg, 2.0)
  assert np.abs(np.asarray(grad)).sum() > 0


def test_corruption_replaces_one_end_uniformly():
  triples = jnp.tile(jnp.array([[3, 1, 4]], jnp.int32), (20_000, 1))
  bad = np.asarray(transe.corrupt(jax.random.key(0), triples, 10))
  np.testing.assert_array_equal(bad[:, 1], 1)
  head_kept, tail_kept = bad[:, 0] == 3, bad[:, 2] == 4
  assert np.all(head_kept | tail_kept)  # never both ends replaced
  replaced_tail = bad[head_kept & ~tail_kept, 2]
  # About half the rows draw a new tail (a draw of 4 keeps it): 0.5 * 0.9.
  assert abs(np.mean(~tail_kept) - 0.45) < 0.02
  counts = np.bincount(replaced_tail, minlength=10)
  others = np.delete(counts, 4)
  assert counts[4] == 0 and others.min() > 0.8 * others.max()


def test_normalize_gives_unit_rows():
  out = np.asarray(transe.normalize(ENT))
  np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-6)
