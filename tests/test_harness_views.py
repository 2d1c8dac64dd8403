"""The harness's evaluation views: K-shot sets, pair outcomes, probe
features, each on small inputs."""

import collections

import jax
import numpy as np
import pytest

import data
from data import minimal_pairs as pairs_lib
from data.tasks import Task
from zoo import loading, models
from zoo.harness import few_shot, minimal_pairs, probe


def _task(n_per_class=(40, 25, 3)):
  rows = [dict(text=f"example {c} {i}", inputs=f"x: example {c} {i}",
               targets=f"l{c}", label=c)
          for c, n in enumerate(n_per_class) for i in range(n)]
  return Task("toy", "class", "accuracy", ["l0", "l1", "l2"],
              {"train": rows, "validation": rows[:10], "test": rows[:10]})


def test_k_shot_sets_have_k_per_class_and_are_the_same_for_every_cell():
  task = _task()
  shots = few_shot.subset(task, 8, seed=0)
  counts = collections.Counter(ex["label"] for ex in shots)
  assert counts == {0: 8, 1: 8, 2: 3}  # a class with fewer gives all
  again = few_shot.subset(task, 8, seed=0)
  assert [ex["text"] for ex in again] == [ex["text"] for ex in shots]
  other = few_shot.subset(task, 8, seed=1)
  assert {ex["text"] for ex in other} != {ex["text"] for ex in shots}
  assert few_shot.with_train(task, shots).train == shots
  assert len(task.train) == 68  # the task itself is untouched


def test_pair_outcomes_count_ties_as_half():
  got = minimal_pairs.outcomes(np.array([1.0, 2.0, 3.0]),
                               np.array([0.0, 2.0, 4.0]))
  assert got.tolist() == [1.0, 0.5, 0.0]


def test_a_scorer_that_prefers_shorter_texts_is_blind_on_the_suite():
  """Good and bad sentences have the same pieces count and the suite is
  balanced, so length and context-free word preferences give 50."""
  tok = data.load_tokenizer({})
  pairs = pairs_lib.load(tokenizer=tok, n=40)
  view = minimal_pairs.score_pairs(
      lambda texts: -np.array([len(tok.encode(t)) for t in texts]), pairs)
  for item in view["tasks"].values():
    assert np.mean(item["preds"][0]) == 0.5
  weights = collections.defaultdict(lambda: np.random.default_rng(
      len(weights)).normal())
  unigram = minimal_pairs.score_pairs(
      lambda texts: [sum(weights[w] for w in t.split()) for t in texts],
      pairs)
  for item in unigram["tasks"].values():
    assert np.mean(item["preds"][0]) == pytest.approx(0.5)


@pytest.fixture(scope="module")
def tiny_bert():
  tok = data.load_tokenizer({})
  config = models.make_config("bert", "tiny", vocab_size=tok.vocab_size)
  params = models.get("bert").Model(config).init(
      jax.random.key(0), np.ones((1, 8), np.int32))["params"]
  return loading.Loaded("bert", config, params, tok, None, "")


def test_probe_features_pool_every_layer_over_real_pieces(tiny_bert):
  texts = ["a short one", "a somewhat longer text than the first one is"]
  feats = probe.features(tiny_bert, texts, max_len=16, batch_size=4)
  layers = tiny_bert.config.num_layers + 1
  assert feats.shape == (2, layers, tiny_bert.config.embed_dim)
  out = tiny_bert.embed(texts[:1], max_len=16)
  np.testing.assert_allclose(feats[0, -1], out["mean"][0], rtol=1e-5,
                             atol=1e-6)


def test_probe_view_fits_train_and_predicts_the_whole_split(tiny_bert):
  words = ("cat dog horse cow", "car bus train truck")
  rng = np.random.default_rng(0)
  rows = [dict(text=" ".join(rng.permutation(words[c].split())), label=c)
          for c in (0, 1) * 40]
  task = Task("toy", "class", "accuracy", ["animal", "vehicle"],
              {"train": rows[:60], "validation": rows[60:]})
  view = probe.run(tiny_bert, task, "validation", {"max_len": 8})
  assert len(view["preds"][0]) == len(view["labels"]) == 20
  assert len(view["layer_weights"]) == tiny_bert.config.num_layers + 1
  acc = np.mean(np.array(view["preds"][0]) == np.array(view["labels"]))
  assert acc > 0.9  # random features of two disjoint vocabularies


def test_a_backbone_without_its_lm_head_is_na_on_minimal_pairs(tiny_bert):
  """Quick-Thought trains no MLM head: no likelihood, so "n/a", not a crash
  and not a score from an untrained head."""
  import dataclasses  # pylint: disable=import-outside-toplevel
  from zoo.harness import report  # pylint: disable=import-outside-toplevel
  headless = {k: v for k, v in tiny_bert.params.items() if k != "mlm"}
  loaded = dataclasses.replace(tiny_bert, params=headless)
  pairs = {"p": [pairs_lib.Pair("p", "the dog runs", "the dog run")] * 4}
  out = minimal_pairs.run(loaded, pairs)
  assert out["method"] == "none" and "lack" in out["skipped"]
  assert np.isnan(out["tasks"]["p"]["preds"][0]).all()
  assert report._iv([np.nan, np.nan, np.nan]) == "n/a"  # pylint: disable=protected-access
  with_head = minimal_pairs.run(tiny_bert, pairs)
  assert with_head["method"] == "pll"


def test_an_encoder_decoder_is_read_as_its_scheme_and_as_asked():
  """A T5 pre-trained by BERT-style corruption is read by infilling; its
  random init is also read that way when asked (`how`), and the view
  says which reading it holds."""
  import dataclasses  # pylint: disable=import-outside-toplevel
  tok = data.load_tokenizer({})
  config = models.make_config("t5", "tiny", vocab_size=tok.vocab_size)
  params = models.get("t5").Model(config).init(
      jax.random.key(0), np.ones((1, 8), np.int32),
      np.ones((1, 8), np.int32))["params"]
  loaded = loading.Loaded("t5", config, params, tok, None, "")
  pairs = {"p": [pairs_lib.Pair("p", "the dog runs", "the dog run"),
                 pairs_lib.Pair("p", "the dogs run", "the dogs runs")]}
  assert minimal_pairs.run(loaded, pairs)["method"] == "sentinel"
  bert_style = dataclasses.replace(loaded, objective="t5_bert")
  out = minimal_pairs.run(bert_style, pairs)
  asked = minimal_pairs.run(loaded, pairs, how="infill")
  assert out["method"] == asked["method"] == "infill"
  assert out["tasks"] == asked["tasks"]
  texts = ["the dog runs", "the dogs run"]
  np.testing.assert_array_equal(bert_style.score(texts),
                                loaded.score(texts, how="infill"))
  assert not np.array_equal(loaded.score(texts), loaded.score(texts,
                                                              how="infill"))
