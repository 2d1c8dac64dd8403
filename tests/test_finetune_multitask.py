"""Multi-task fine-tuning (BERT and PALs): annealed task sampling, what
each task owns, and learning every task on one backbone."""

import jax
import numpy as np
import pytest
from flax import traverse_util

import test_finetune as ft
from zoo import checkpoint as ckpt_lib
from zoo import models
from zoo.compress.heads import count_params
from zoo.finetune import multitask as mt


def test_sampling_anneals_from_sizes_to_their_fifth_root():
  sizes = [100, 1000, 10_000]
  np.testing.assert_allclose(mt.sampling_weights(sizes, 0, 11),
                             np.array(sizes) / 11_100)
  last = np.array(sizes, float) ** 0.2
  np.testing.assert_allclose(mt.sampling_weights(sizes, 10, 11),
                             last / last.sum())
  mid = np.array(sizes, float) ** 0.6  # alpha = 1 - 0.8 * 5 / 10
  np.testing.assert_allclose(mt.sampling_weights(sizes, 5, 11),
                             mid / mid.sum())
  np.testing.assert_allclose(mt.sampling_weights(sizes, 10, 11, anneal=False),
                             np.array(sizes) / 11_100)
  order = mt.task_order(sizes, 4000, seed=0)
  early, late = np.bincount(order[:400], minlength=3) / 400, np.bincount(
      order[-400:], minlength=3) / 400
  assert early[2] > 0.8 and late[2] < 0.6 and late[0] > 4 * early[0]


def test_split_and_merge_partition_the_pal_params():
  tree = {"encoder": {"pal_encoder": np.ones(2), "layer_0": {
      "attention": {"w": np.zeros(3)}, "pal_attention": {"w": np.ones(4)}}},
          "embed": {"table": np.ones(5)}}
  shared, pal = mt.split(tree)
  assert set(traverse_util.flatten_dict(pal)) == {
      ("encoder", "pal_encoder"), ("encoder", "layer_0", "pal_attention", "w")}
  assert ("encoder", "layer_0", "attention", "w") in traverse_util.flatten_dict(
      shared)
  back = traverse_util.flatten_dict(mt.merge(shared, pal))
  assert back.keys() == traverse_util.flatten_dict(tree).keys()
  assert count_params(pal) == 6 and count_params(shared) == 8


@pytest.fixture(scope="module")
def two_tasks():
  """The topic task and its mirror (the same texts, labels swapped)."""
  topic = ft._task("topic", "class", "accuracy", ["animal", "vehicle"],  # pylint: disable=protected-access
                   ft._topic_examples)  # pylint: disable=protected-access
  swap = lambda ex: dict(ex, label=1 - ex["label"])
  mirror = ft.Task("mirror", "class", "accuracy", ["vehicle", "animal"], {
      k: [swap(ex) for ex in v] for k, v in topic.splits.items()})
  return {"topic": topic, "mirror": mirror}


def _run(tok, tasks, per_task, steps):
  return mt.finetune_many("bert", ft._config(tok), None, tasks, tok,  # pylint: disable=protected-access
                      per_task=per_task, pal_dim=16, steps=steps,
                      batch_size=16, lr=1e-3, max_len=16)


def test_each_task_owns_its_pals_and_head_and_shares_the_rest(tok,
                                                              two_tasks):
  _, state = _run(tok, two_tasks, "pals", steps=3)
  topic, mirror = state.own["topic"], state.own["mirror"]
  keys = set(traverse_util.flatten_dict(topic["pal"]))
  assert ("encoder", "pal_encoder") in keys and ("encoder", "pal_decoder") in (
      keys)
  assert all(any(k.startswith("pal_") for k in path) for path in keys)
  assert not any(mt.is_pal(p) for p in traverse_util.flatten_dict(
      state.shared))
  # A task's PALs and head are its own: fresh, different init per task.
  assert not np.allclose(topic["pal"]["encoder"]["pal_encoder"],
                         mirror["pal"]["encoder"]["pal_encoder"])
  head = count_params(topic["head"])
  assert state.added_params("topic") == count_params(topic["pal"]) + head
  # Each task reads the one shared backbone through its own PALs.
  for name in two_tasks:
    flat = traverse_util.flatten_dict(state.params(name)["backbone"])
    for path, value in traverse_util.flatten_dict(state.shared).items():
      assert flat[path] is value
  _, heads_only = _run(tok, two_tasks, "heads", steps=3)
  assert heads_only.added_params("topic") == head
  with pytest.raises(ValueError, match="per_task 'all' is not one of"):
    _run(tok, two_tasks, "all", steps=1)


def test_a_step_moves_the_shared_params_its_pals_and_its_head(tok,
                                                               two_tasks):
  _, state = _run(tok, two_tasks, "pals", steps=1)
  spec = state.specs["topic"]
  arrays = mt.run_lib.train_arrays(spec, two_tasks["topic"], tok,
                                   {"inputs": 16, "targets": 8})
  batch = {k: v[:16] for k, v in arrays.items()}
  copy = lambda tree: jax.tree.map(np.array, tree)
  shared, own = copy(state.shared), copy(state.own["topic"])
  tx = mt._adam(0.01)  # pylint: disable=protected-access
  new_shared, new_own, *_, loss = mt.train_step(
      spec, copy(shared), copy(own), tx.init(shared), tx.init(own), batch,
      jax.random.key(1), 1e-3)
  moved = lambda a, b: [not np.array_equal(x, y) for x, y in zip(
      jax.tree.leaves(a), jax.tree.leaves(b))]
  assert np.isfinite(float(loss))
  # Every layer's params have a gradient.
  assert all(moved(new_shared["encoder"], shared["encoder"]))
  assert all(moved(new_own["head"], own["head"]))
  assert any(moved(new_own["pal"], own["pal"]))


@pytest.mark.slow
@pytest.mark.parametrize("per_task", ["pals", "heads"])
def test_one_backbone_learns_both_tasks(tok, two_tasks, per_task):
  scores, state = _run(tok, two_tasks, per_task, steps=160)
  assert set(state.tasks) == {"topic", "mirror"}
  for name in two_tasks:
    assert scores[name]["validation/accuracy"] > 80, scores


def test_each_task_compiles_its_step_once(tok, two_tasks):
  """Fresh PALs, heads and optimizer states start placed as the step
  returns them, beside a backbone placed as a restored checkpoint is: no
  task compiles its step a second time after its first step."""
  config = ft._config(tok, num_layers=3)  # pylint: disable=protected-access
  params = jax.device_put(
      models.init_params("bert", config, jax.random.key(1), heads=False),
      ckpt_lib.replicated())
  before = mt.train_step._cache_size()  # pylint: disable=protected-access
  _, state = mt.finetune_many("bert", config, params, two_tasks, tok,
                              per_task="pals", pal_dim=16, steps=4,
                              batch_size=16, lr=1e-3, max_len=16, splits=())
  assert mt.train_step._cache_size() == before + len(  # pylint: disable=protected-access
      set(state.specs.values()))
