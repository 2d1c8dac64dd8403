"""plm (XLNet): permutation noise, masks, the scheme, and the l2r score."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import zoo
from configs.compare import family as family_grid
from configs.compare import smoke
from objectives import common
from objectives import noise
from objectives import permutation
from tests import objective_checks as testing
from tests.fast_params import fast_params
from zoo import models, scoring, train
from zoo.models import xlnet

SP = testing.SPECIALS
# One row: document 1 at 0..3, document 2 at 4, padding at 5. Order of
# document 1: 2, 0 (non-targets), then 3, 1 (targets).
DOC = np.array([[1, 1, 1, 1, 2, 0]])
TARGETS = np.array([[0, 1, 0, 1, 0, 0]], bool)
PAPER_RANKS = np.array([[1, 3, 0, 2, 4, 5]])
RELEASE_RANKS = np.array([[-1, 3, -1, 2, -1, -1]])


def _streams(ranks, slots=3):
  """(perm_mask, content, query, target_mapping) of the hand row as numpy."""
  out = permutation.masks_from_order(jnp.asarray(ranks), jnp.asarray(TARGETS),
                                     jnp.asarray(DOC), slots)
  content, query = xlnet.attention_masks(jnp.asarray(DOC), 0, None,
                                         out["perm_mask"])
  return tuple(np.asarray(x[0]).astype(int) for x in (
      out["perm_mask"], content, query, out["target_mapping"]))


def test_masks_of_a_hand_written_order_are_the_papers():
  perm, content, query, mapping = _streams(PAPER_RANKS)
  np.testing.assert_array_equal(perm, [[0, 1, 0, 1, 1, 1],
                                       [0, 1, 0, 0, 1, 1],
                                       [1, 1, 0, 1, 1, 1],
                                       [0, 1, 0, 1, 1, 1],
                                       [1, 1, 1, 1, 0, 1],
                                       [1, 1, 1, 1, 1, 1]])
  # Content stream: z_<=t; query stream: z_<t (rows of real positions).
  np.testing.assert_array_equal(content[:5], [[1, 0, 1, 0, 0, 0],
                                              [1, 1, 1, 1, 0, 0],
                                              [0, 0, 1, 0, 0, 0],
                                              [1, 0, 1, 1, 0, 0],
                                              [0, 0, 0, 0, 1, 0]])
  np.testing.assert_array_equal(query[[1, 3]], [[1, 0, 1, 1, 0, 0],
                                                [1, 0, 1, 0, 0, 0]])
  np.testing.assert_array_equal(mapping, [[0, 1, 0, 0, 0, 0],
                                          [0, 0, 0, 1, 0, 0],
                                          [0, 0, 0, 0, 0, 0]])


def test_release_order_lets_non_targets_see_each_other():
  ranks = permutation.factorisation_ranks(jax.random.key(0),
                                          jnp.asarray(TARGETS), "release")
  assert (np.asarray(ranks)[~TARGETS] == -1).all()
  _, content, query, _ = _streams(RELEASE_RANKS)
  np.testing.assert_array_equal(content[[0, 2]], [[1, 0, 1, 0, 0, 0]] * 2)
  np.testing.assert_array_equal(query[[1, 3]], [[1, 0, 1, 1, 0, 0],
                                                [1, 0, 1, 0, 0, 0]])
  with pytest.raises(ValueError, match="factorisation order"):
    permutation.factorisation_ranks(jax.random.key(0), jnp.asarray(TARGETS),
                                    "random")


def _runs(flags):
  """Lengths of the maximal runs of True in a 1-d bool array."""
  edges = np.diff(np.concatenate([[0], flags.astype(int), [0]]))
  return np.flatnonzero(edges < 0) - np.flatnonzero(edges > 0)


def _check_target_spans(batch, out, ratio, max_span):
  tok, doc = np.asarray(batch["tokens"]), np.asarray(batch["doc_ids"])
  mask = np.asarray(out["mask"])
  ok = np.asarray(noise.eligible(batch["tokens"], SP))
  assert not (mask & ~ok).any()
  runs, eligible, picked = [], 0, 0
  for r in range(mask.shape[0]):
    assert mask[r].sum() <= tok.shape[1] // ratio
    for d in np.unique(doc[r][doc[r] > 0]):
      m, n = mask[r][doc[r] == d], ok[r][doc[r] == d].sum()
      runs.extend(_runs(m))
      if n >= 4 * ratio * max_span:  # whole contexts dominate
        eligible, picked = eligible + n, picked + m.sum()
  rate = picked / eligible
  assert 0.75 / ratio < rate <= 1 / ratio, rate
  # Spans, not single pieces; two spans of neighbouring contexts may touch.
  assert 1.5 < np.mean(runs) and max(runs) <= 2 * max_span, runs


def _check_slots(batch, out):
  mask, weights = np.asarray(out["mask"]), np.asarray(out["weights"])
  mapping = np.asarray(out["target_mapping"])
  np.testing.assert_array_equal(weights.sum(-1), mask.sum(-1))
  assert (mapping[~weights] == 0).all()  # unused slots: zero rows
  at = mapping[weights].argmax(-1)
  assert (mapping[weights].sum(-1) == 1).all()
  assert mask[np.nonzero(weights)[0], at].all()
  np.testing.assert_array_equal(np.asarray(out["targets"])[weights],
                                np.asarray(batch["tokens"])[
                                    np.nonzero(weights)[0], at])


def _check_streams(batch, out, order):
  doc, ranks = np.asarray(batch["doc_ids"]), np.asarray(out["ranks"])
  mask = np.asarray(out["mask"])
  content, query = (np.asarray(x) for x in xlnet.attention_masks(
      batch["doc_ids"], 0, None, out["perm_mask"]))
  real = doc > 0
  same = (doc[:, :, None] == doc[:, None, :]) & real[:, None, :]
  before = ranks[:, None, :] < ranks[:, :, None]
  eye = np.eye(doc.shape[1], dtype=bool)[None]
  shared = (~mask[:, :, None] & ~mask[:, None, :]) if order == "release" else (
      False)
  want_content = same & (before | eye | shared)
  np.testing.assert_array_equal(content[real], want_content[real])
  # The query stream of a target sees exactly what precedes it, in its doc.
  np.testing.assert_array_equal(query[mask], (same & before)[mask])
  assert not (content[real] & ~same[real]).any()
  assert query[mask].any(-1).all()  # every target has some context


@pytest.mark.parametrize("order", ["paper", "release"])
def test_permutation_noise_properties(order):
  batch = testing.tiny_batch(seq_len=128, batch_size=8, seed=3)
  doc = np.asarray(batch["doc_ids"])
  assert (doc == 0).any() and (doc.max(-1) >= 2).sum() >= 6  # pad, packing
  ratio, max_span = 4, 5
  out = jax.jit(lambda b, r: permutation.permute(
      r, b, SP, ratio, max_span, order))(batch, jax.random.key(7))
  assert out["target_mapping"].shape == (8, 32, 128)
  _check_target_spans(batch, out, ratio, max_span)
  _check_slots(batch, out)
  _check_streams(batch, out, order)


def test_plm_binds_to_xlnet_only():
  with pytest.raises(ValueError, match="two-stream"):
    testing.build("plm", "bert")
  with pytest.raises(ValueError, match="interface"):
    testing.build("plm", "gpt2")
  with pytest.raises(ValueError, match="ratio"):
    testing.build("plm", "xlnet", ratio=1)
  with pytest.raises(ValueError, match="order"):
    testing.build("plm", "xlnet", order="random")
  assert family_grid.FAMILY_SCHEME["xlnet"] == "plm"
  assert family_grid.family_of("plm") == "xlnet"


def test_plm_trains_and_never_sees_its_targets():
  batch = testing.tiny_batch()
  obj = testing.build("plm", "xlnet")
  out = testing.check(obj, batch, steps=20)
  inputs = obj.corrupt(common.as_batch(batch), jax.random.key(5))
  assert out["metrics"]["weight_sum"] > 0
  # Changing a target and every piece after it in the order leaves its
  # query-stream logits unchanged: nothing leaks.
  params = nn.meta.unbox(obj.init(jax.random.key(0), batch))
  logits = lambda x: obj.run(params, x, None, True)["logits"]
  ranks, weights = np.asarray(inputs["ranks"]), np.asarray(inputs["weights"])
  at = np.asarray(inputs["target_at"])
  b = 0  # its first target in the order: the later ones see it
  k = min(np.flatnonzero(weights[b]), key=lambda s: ranks[b, at[b, s]])
  i = int(at[b, k])
  later = jnp.asarray(ranks >= ranks[b, i]) & (jnp.arange(4) == b)[:, None]
  noisy = jnp.where(later, (inputs["tokens"] + 11) % 400 + 7,
                    inputs["tokens"])
  before, after = logits(inputs), logits(dict(inputs, tokens=noisy))
  np.testing.assert_allclose(after[b, k], before[b, k], atol=1e-5)
  assert np.abs(np.asarray(after[b] - before[b])).max() > 1e-3


def _l2r_by_hand(model, params, row):
  """Sum over ordinary pieces t >= 1 of log p(x_t | x_<t), one call each."""
  total = 0.0
  for t in range(1, len(row)):
    if row[t] == SP.pad or not noise.eligible(row[t:t + 1], SP)[0]:
      continue
    prefix = jnp.asarray(row[None, :t + 1])
    perm = np.triu(np.ones((t + 1, t + 1)))[None]  # j >= i: not seen
    mapping = np.eye(t + 1)[None, t:t + 1]
    logits = model.apply({"params": params}, prefix, perm_mask=perm,
                         target_mapping=mapping)["logits"][0, 0]
    total += float(jax.nn.log_softmax(logits)[row[t]])
  return total


def test_l2r_score_equals_per_position_calls():
  config = models.make_config("xlnet", "tiny", num_layers=1)
  model = models.get("xlnet").Model(config)
  rows = np.random.RandomState(0).randint(7, 400, (2, 7)).astype(np.int32)
  rows[:, -1] = SP.eos
  rows[0, 3], rows[0, 4:] = SP.eos, SP.pad
  params = nn.meta.unbox(fast_params(model, jnp.asarray(rows))["params"])
  assert scoring.method("xlnet", config) == "permutation_l2r"
  got = scoring.score("xlnet", config, params, rows, SP)
  want = [_l2r_by_hand(model, params, r) for r in rows]
  np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
  assert (got < 0).all()


def test_zoo_load_scores_an_xlnet_plm_workdir(tmp_path):
  c = smoke.get_config().pretrain
  c.model, c.objective = "xlnet", "plm"
  c.model_args = {"num_layers": 1}
  c.steps, c.checkpoint_every, c.log_every = 2, 2, 2
  train.train(c, str(tmp_path / "run"))
  m = zoo.load(str(tmp_path / "run"))
  texts = ["the river bank was muddy", "hello there"]
  got = m.score(texts)
  assert got.shape == (2,) and np.isfinite(got).all() and (got < 0).all()
  want = scoring.score("xlnet", m.config, m.params, m.batch(texts[:1]),
                       m.tokenizer.specials())
  np.testing.assert_allclose(got[0], want[0], rtol=0, atol=1e-4)


def test_sharded_plm_step_equals_one_device():
  from configs import xlnet_plm  # pylint: disable=import-outside-toplevel
  from tests.test_train import _one_device, _pieces  # pylint: disable=import-outside-toplevel
  from zoo import sharding, train_lib  # pylint: disable=import-outside-toplevel
  config = xlnet_plm.get_config("tiny,batch_size=8,seq_len=32,steps=2")
  results = []
  for mesh in (sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2}),
               _one_device()):
    loader, setup, step = _pieces(config, mesh)
    state = setup.init(train_lib.init_rng(0))
    with sharding.activate(mesh, setup.rules):
      for _ in range(2):
        state, metrics = step(state, train_lib.global_batch(
            next(loader), setup.batch_sharding, 8))
    results.append((jax.device_get(state["params"]),
                    float(metrics["step_loss"]),
                    float(metrics["weight_sum"])))
  (params, loss, weight), (params1, loss1, weight1) = results
  assert weight == weight1 > 0  # the same permutations and targets
  np.testing.assert_allclose(loss, loss1, rtol=1e-5)
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(params1)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
