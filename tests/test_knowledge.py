"""zoo.knowledge: TransE vectors of a knowledge base."""

from types import SimpleNamespace

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


def _tiny_kb(monkeypatch, tmp_path):
  """A 5-entity chain as the "tiny" knowledge base, cached under tmp_path."""
  kb = SimpleNamespace(synsets=[None] * 5, relations=["hypernym", "part"],
                       triples=np.asarray([[i, 0, i + 1] for i in range(4)]
                                          + [[i + 1, 1, i] for i in range(4)],
                                          np.int32))
  monkeypatch.setattr(knowledge.linking, "linker",
                      lambda name: SimpleNamespace(kb=kb))
  monkeypatch.setattr(knowledge.wordnet, "held_out",
                      lambda base: np.zeros(len(base.triples), bool))
  monkeypatch.setattr(knowledge.data_config, "data_dir", lambda: tmp_path)
  return kb


def test_the_cache_keeps_relations_and_refits_a_file_without_them(
    monkeypatch, tmp_path):
  _tiny_kb(monkeypatch, tmp_path)
  fits = []
  fit = knowledge.train_transe
  monkeypatch.setattr(knowledge, "train_transe",
                      lambda *a: fits.append(1) or fit(*a, progress=False))
  c = knowledge.TransE(dim=4, epochs=2, batch_size=4)
  vectors = knowledge.transe_vectors.__wrapped__
  first = vectors("tiny", c)
  assert first["table"].shape == (6, 4) and first["relations"].shape == (2, 4)
  assert not first["table"][0].any() and len(fits) == 1
  again = vectors("tiny", c)
  assert len(fits) == 1  # read back, not refitted
  for key in first:
    np.testing.assert_array_equal(again[key], first[key])
  path, = (tmp_path / "entities").glob("*.npz")
  np.savez(path, table=first["table"])  # a file from before relations
  assert vectors("tiny", c)["relations"].shape == (2, 4) and len(fits) == 2


def test_transe_logits_are_minus_the_distance_by_hand(monkeypatch, tmp_path):
  _tiny_kb(monkeypatch, tmp_path)
  rng = np.random.default_rng(0)
  table = rng.standard_normal((6, 3)).astype(np.float32)
  relations = rng.standard_normal((2, 3)).astype(np.float32)
  monkeypatch.setattr(knowledge, "transe_vectors", lambda kb, c: {
      "table": table, "relations": relations})
  heads, candidates = np.asarray([0, 3]), np.asarray([1, 4, 2])
  got = knowledge.transe_logits("tiny", knowledge.TransE(dim=3), heads,
                                "part", candidates)
  want = [[-np.abs(table[h + 1] + relations[1] - table[c + 1]).sum()
           for c in candidates] for h in heads]
  np.testing.assert_allclose(got, want, rtol=1e-6)


def test_the_optimised_step_keeps_the_numbers_of_an_unoptimised_one():
  """TransE's step compiles at XLA's default level even where a process
  lowers it (the tests run at level 0): one step's params and loss agree
  with the same step compiled at the process's level, to float rounding."""
  import jax  # pylint: disable=import-outside-toplevel
  c = knowledge.TransE(dim=8, batch_size=6)
  tx, step = knowledge._step_fn(c, 10)  # pylint: disable=protected-access
  params = knowledge._init((10, 2), c)  # pylint: disable=protected-access
  triples = np.asarray([(i, i % 2, (i + 3) % 10) for i in range(6)],
                       np.int32)
  args = (params, tx.init(params), triples, jax.random.key(1))
  got = step(*args)
  want = jax.jit(step.__wrapped__)(*args)
  for a, b in zip(jax.tree_util.tree_leaves(got),
                  jax.tree_util.tree_leaves(want)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6,
                               atol=1e-6)
  assert float(got[2]) > 0  # a margin loss that is not yet zero
