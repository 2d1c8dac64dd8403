"""Tests of zoo.harness.baselines: bag of words and the n-gram LM."""

import numpy as np
import pytest

from data import tasks
from data import tokenizer as tok_lib
from data.tasks import metrics
from zoo.harness import baselines


@pytest.fixture(scope="module")
def tokenizer():
  from data import sample  # pylint: disable=g-import-not-at-top
  return tok_lib.SentencePieceTokenizer.load(sample.ensure() / "tokenizer")


def test_bow_features_counts(tokenizer):
  feats = baselines.bow_features(["the the cat", ""], tokenizer)
  assert feats.shape == (2, tokenizer.vocab_size)
  assert feats.dtype == np.float32
  ids = tokenizer.encode("the the cat")
  the = ids[0]
  assert feats[0, the] == pytest.approx(np.log1p(ids.count(the)))
  assert not feats[1].any()
  assert feats[:, :2].sum() == 0  # pad and eos


def _keyword_task() -> tasks.Task:
  rng = np.random.default_rng(0)
  words = ("river stone cloud paper window garden music table letter "
           "morning").split()
  keys = ["apple", "engine", "doctor"]
  def example(i):
    label = int(rng.integers(0, 3))
    text = list(rng.choice(words, 6)) + [keys[label]]
    rng.shuffle(text)
    return dict(text=" ".join(text), label=label, key=str(i))
  rows = [example(i) for i in range(360)]
  splits = dict(train=rows[:240], validation=rows[240:300], test=rows[300:])
  return tasks.Task("keywords", "class", "accuracy", keys, splits)


def test_bow_beats_chance_on_keywords(tokenizer):
  preds, labels = baselines.bow_predictions(_keyword_task(), tokenizer)
  assert preds.dtype == np.int32 and preds.shape == labels.shape == (60,)
  assert np.mean(preds == labels) > 0.9


@pytest.mark.slow
def test_bow_on_sms_spam(tokenizer):
  task = tasks.load("sms_spam")
  preds, labels = baselines.bow_predictions(task, tokenizer)
  assert metrics.f1(preds, labels)["f1"] > 80


def _toy_lm(order=3):
  seqs = [[3, 4, 5, 6], [3, 4, 7], [8, 4, 5], [5, 6, 3, 4, 5]]
  return baselines.NgramLM(vocab_size=12).fit(seqs, order), seqs


@pytest.mark.parametrize("order", [1, 2, 3, 4])
@pytest.mark.parametrize("context", [[], [3, 4], [5, 6, 3, 4], [10, 11],
                                     [4, 10]])
def test_next_id_probabilities_sum_to_one(order, context):
  lm, _ = _toy_lm(order)
  p = np.exp(lm.log_prob(context))
  assert p.shape == (13,)  # 12 ids and the end
  assert p.sum() == pytest.approx(1.0, abs=1e-12)
  assert np.all(p > 0)


def test_bigram_value_by_hand():
  # Padded: S 0 1 E, S 0 2 E. Unigram continuation counts 0:1 1:1 2:1 E:2
  # (n1=3, n2=1, D=3/5); bigram counts S0:2 01:1 1E:1 02:1 2E:1 (D=2/3).
  lm = baselines.NgramLM(vocab_size=3).fit([[0, 1], [0, 2]], order=2)
  unigram = (1 - 0.6 + 0.6 * 4 / 4) / 5
  want = (1 - 2 / 3 + 2 / 3 * 2 * unigram) / 2
  assert np.exp(lm.log_prob([0], [1]))[0] == pytest.approx(want)
  # an empty context is the start symbol: S was followed by 0 alone
  start = 2 / 3 * 1 * unigram / 2
  assert np.exp(lm.log_prob([], [1]))[0] == pytest.approx(start)


def test_seen_beats_shuffled_and_unseen_is_finite():
  lm, seqs = _toy_lm(3)
  seen = seqs[0]
  scores = lm.score([seen, seen[::-1], [9, 10, 11], []])
  assert scores.shape == (4,)
  assert scores[0] > scores[1]
  assert np.all(np.isfinite(scores))
  # a sequence's score is the sum of its steps' log-probs, end included
  steps = [lm.log_prob(seen[:i], [x])[0]
           for i, x in enumerate(seen + [lm.end])]
  assert scores[0] == pytest.approx(sum(steps))


def test_train_ngram_on_text(tokenizer):
  texts = ["The dollar rose today. The euro fell.\nMarkets were calm.",
           "The dollar fell. The euro rose today."]
  lm = baselines.train_ngram(texts, tokenizer, order=3)
  good, bad = tokenizer.encode_batch(["The dollar rose today.",
                                      "today. rose dollar The"])
  scores = lm.score([good, bad])
  assert scores[0] > scores[1]
  assert np.isfinite(scores).all()
