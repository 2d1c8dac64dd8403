"""Structured outputs: tagging, extractive QA, headline generation."""

import re

from data import annotate
from data import sources
from data.tasks import Task, hash_ordered, register

_N_EVAL = 500
_BLANK = "_____"


@register("brown_pos")
def brown_pos() -> Task:
  """Brown corpus part of speech, 12 universal tags, one per word.

  Splits follow the Brown files' buckets (the sample holds out the same
  evaluation files); each split is capped in file order.
  """
  labels = list(sources.UNIVERSAL_TAGS)
  caps = {"train": 8000, "validation": _N_EVAL, "test": _N_EVAL}
  splits = {s: [] for s in caps}
  for f in sources.brown_files():
    for words, tags in f["sentences"]:
      if len(splits[f["split"]]) < caps[f["split"]] and len(words) <= 60:
        splits[f["split"]].append(dict(
            inputs="pos: " + " ".join(words), targets=" ".join(tags),
            words=list(words), tags=[labels.index(t) for t in tags]))
  return Task("brown_pos", "tags", "accuracy", labels, splits)


def _candidates(headline: str) -> list[str]:
  """Names in a headline: capitalised runs, then single capitalised words."""
  words = [w.strip(".,:;!?'\"()") for w in headline.split()]
  runs = [" ".join(headline.split()[a:b]).strip(".,:;!?'\"()")
          for a, b in annotate.phrase_spans(headline.split())]
  singles = [w for i, w in enumerate(words)
             if i and len(w) >= 3 and w[:1].isupper() and w.isalpha()]
  return runs + singles


def cloze(article: dict) -> dict | None:
  """A QA example from one article, or None when its headline names nothing
  that the body mentions."""
  headline, body = article["headline"], article["body"]
  for name in _candidates(headline):
    m = re.search(rf"(?<!\w){re.escape(name)}(?!\w)", body)
    if m and name in headline:
      question = headline.replace(name, _BLANK, 1)
      return dict(inputs=f"question: {question} context: {body}",
                  targets=name, question=question, context=body,
                  answer=name, answer_start=m.start(), id=article["id"])
  return None


@register("bbc_cloze_qa")
def bbc_cloze_qa() -> Task:
  """Cloze-style extractive QA: a headline with one name blanked asks for
  that name's span in the article body."""
  splits = {"train": [], "validation": [], "test": []}
  for a in sources.bbc_articles():
    ex = cloze(a)
    if ex:
      splits[a["split"]].append(ex)
  return Task("bbc_cloze_qa", "span", "squad", [], hash_ordered(splits, "id"))


@register("bbc_headline")
def bbc_headline() -> Task:
  """BBC headline generation from the article body (seq2seq, ROUGE)."""
  splits = {"train": [], "validation": [], "test": []}
  for a in sources.bbc_articles():
    splits[a["split"]].append(dict(inputs=f"summarize: {a['body']}",
                                   targets=a["headline"], id=a["id"]))
  return Task("bbc_headline", "seq2seq", "rouge", [],
              hash_ordered(splits, "id"))
