"""Downstream tasks: sizes, label sets, determinism, alignment, metrics."""

import collections

import numpy as np
import pytest
from scipy import stats as scipy_stats

import data
from data import sources
from data import tasks
from data.tasks import metrics

# name -> (kind, metric, labels, (train, validation, test) sizes or None).
EXPECTED = {
    "rotten_tomatoes": ("class", "accuracy", ["negative", "positive"],
                        (11752, 500, 500)),
    "trec": ("class", "accuracy", ["ABBR", "DESC", "ENTY", "HUM", "LOC",
                                   "NUM"], (4381, 500, 500)),
    "sms_spam": ("class", "f1", ["ham", "spam"], (3512, 500, 500)),
    "vader": ("regression", "pearson_spearman", [], (22619, 500, 500)),
    "movie_reply": ("pair", "accuracy", ["unrelated", "reply"],
                    (8000, 500, 500)),
    "bbc_topic": ("class", "accuracy", list(sources.BBC_TOPICS),
                  (1482, 305, 305)),
    "brown_pos": ("tags", "accuracy", list(sources.UNIVERSAL_TAGS),
                  (8000, 500, 500)),
    "bbc_cloze_qa": ("span", "squad", [], None),
    "bbc_headline": ("seq2seq", "rouge", [], (1482, 305, 305)),
}


@pytest.fixture(scope="module")
def loaded():
  return {name: tasks.load(name) for name in tasks.names()}


def test_every_task_loads_with_its_sizes_and_labels(loaded):
  assert sorted(loaded) == sorted(EXPECTED)
  for name, task in loaded.items():
    kind, metric, labels, sizes = EXPECTED[name]
    assert (task.kind, task.metric, task.labels) == (kind, metric, labels)
    got = tuple(len(task.splits[s]) for s in ("train", "validation", "test"))
    if sizes:
      assert got == sizes, name
    assert min(got) >= 100 and max(got[1:]) <= 500, name
    for ex in task.train[:50] + task.test[:50]:
      assert ex["inputs"].strip() and ex["targets"].strip(), name
      if kind in ("class", "pair"):
        assert task.labels[ex["label"]] == ex["targets"]


def test_every_label_occurs_in_every_split(loaded):
  for name in ("rotten_tomatoes", "trec", "sms_spam", "movie_reply",
               "bbc_topic"):
    for split, examples in loaded[name].splits.items():
      counts = collections.Counter(ex["label"] for ex in examples)
      assert len(counts) == len(loaded[name].labels), (name, split)
  pairs = loaded["movie_reply"].train
  assert 0.45 < np.mean([ex["label"] for ex in pairs]) < 0.55


def test_split_prefixes_are_fair_samples(loaded):
  """An `eval_limit` of 100 sees every label that makes up >= 5% of the
  split (splits are hash-ordered, not grouped by label)."""
  for name in ("rotten_tomatoes", "trec", "sms_spam", "movie_reply",
               "bbc_topic"):
    for split, examples in loaded[name].splits.items():
      counts = collections.Counter(ex["label"] for ex in examples)
      common = {k for k, n in counts.items() if n >= 0.05 * len(examples)}
      head = {ex["label"] for ex in examples[:100]}
      assert common <= head, (name, split, sorted(common - head))


def test_splits_are_disjoint_and_deterministic(loaded):
  for name in ("rotten_tomatoes", "vader", "trec"):
    texts = {s: {ex["inputs"] for ex in v}
             for s, v in loaded[name].splits.items()}
    assert not texts["train"] & texts["test"]
    assert not texts["validation"] & texts["test"]
  again = tasks.load("trec")
  assert again.validation == loaded["trec"].validation


def test_bbc_tasks_share_the_held_out_split(loaded):
  held_out = {a["id"] for a in sources.bbc_articles() if a["split"] != "train"}
  for name in ("bbc_topic", "bbc_cloze_qa", "bbc_headline"):
    ids = {ex["id"] for s in ("validation", "test")
           for ex in loaded[name].splits[s]}
    assert ids <= held_out
    assert not {ex["id"] for ex in loaded[name].train} & held_out


def test_cloze_answers_are_spans_of_the_body(loaded):
  for ex in loaded["bbc_cloze_qa"].validation:
    start = ex["answer_start"]
    assert ex["context"][start:start + len(ex["answer"])] == ex["answer"]
    assert "_____" in ex["question"] and ex["answer"] not in ex["question"]


def test_tags_align_with_words(loaded):
  task = loaded["brown_pos"]
  for ex in task.validation[:20]:
    assert len(ex["words"]) == len(ex["tags"])
    assert ex["targets"].split() == [task.labels[t] for t in ex["tags"]]
  tagged = collections.Counter(t for ex in task.train for t in ex["tags"])
  assert set(tagged) == set(range(len(task.labels)))


def test_tokenizer_adds_aligned_ids():
  tok = data.load_tokenizer({})
  pos = tasks.load("brown_pos", tokenizer=tok)
  ex = pos.validation[0]
  assert len(ex["token_ids"]) == len(ex["tag_ids"])
  assert [t for t in ex["tag_ids"] if t >= 0] == ex["tags"]
  qa = tasks.load("bbc_cloze_qa", tokenizer=tok)
  for ex in qa.validation[:20]:
    first, last = ex["answer_span"]
    got = tok.decode(ex["context_ids"][first:last + 1])
    assert got == ex["answer"]
    assert tok.decode(ex["target_ids"]) == ex["targets"]
  with pytest.raises(ValueError, match="unknown task"):
    tasks.load("glue")


def test_metrics_against_references():
  rng = np.random.default_rng(0)
  x = rng.normal(size=50)
  y = x + rng.normal(size=50)
  y[:5] = y[5]  # ties
  got = metrics.compute("pearson_spearman", x, y)
  assert got["pearson"] == pytest.approx(100 * scipy_stats.pearsonr(x, y)[0])
  assert got["spearman"] == pytest.approx(
      100 * scipy_stats.spearmanr(x, y)[0])
  assert metrics.f1([1, 1, 0, 0], [1, 0, 1, 0])["f1"] == pytest.approx(50)
  assert metrics.squad(["The Bank of England"], ["bank of england"]) == {
      "exact_match": 100.0, "f1": 100.0}
  r = metrics.rouge(["police kill the gunman"], ["police killed the gunman"])
  assert r["rouge1"] == pytest.approx(75) and r["rougeL"] == pytest.approx(75)
  assert r["rouge2"] == pytest.approx(100 / 3)
  with pytest.raises(ValueError, match="unknown metric"):
    metrics.compute("bleu", [], [])
