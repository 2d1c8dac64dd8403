"""zoo.knowledge: TransE vectors of a knowledge base."""

import numpy as np

from objectives import transe
from zoo import knowledge


def _ranks(params, triples):
  """Rank of each true tail among all entities by TransE distance."""
  ent, rel = params["entities"], params["relations"]
  k = len(ent)
  ranks = []
  for h, r, t in triples:
    cand = np.stack([np.full(k, h), np.full(k, r), np.arange(k)], 1)
    d = np.asarray(transe.distance(ent, rel, cand.astype(np.int32)))
    ranks.append(int((d < d[t]).sum()) + 1)
  return np.asarray(ranks)


def test_transe_learns_a_chain_and_its_inverse():
  # 12 entities on a line: "next" i -> i + 1, "previous" i + 1 -> i.
  nxt = [(i, 0, i + 1) for i in range(11)]
  prev = [(i + 1, 1, i) for i in range(11)]
  triples = np.asarray(nxt + prev, np.int32)
  c = knowledge.TransE(dim=16, epochs=400, batch_size=22, lr=0.01, margin=1.0)
  params, losses = knowledge.train_transe(triples, 12, 2, c, progress=False)
  assert losses[-1] < 0.2 * losses[0]
  ranks = _ranks(params, triples)
  assert np.mean(ranks <= 2) > 0.9, ranks
  np.testing.assert_allclose(np.linalg.norm(params["entities"], axis=1), 1.0,
                             rtol=1e-5)
  # Direction matters: a relation read backwards ranks its head low.
  backwards = _ranks(params, triples[:, [2, 1, 0]])
  assert np.mean(ranks == 1) > 0.4 and np.mean(backwards == 1) < 0.1
  assert np.mean(backwards) > 2 * np.mean(ranks)
