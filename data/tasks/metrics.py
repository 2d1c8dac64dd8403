"""The metrics `Task.metric` names, on Python lists (host side, after decoding).

Each returns a dict of floats in [0, 100] (correlations in [-100, 100]), as
GLUE and SQuAD tables print them.
"""

import collections
import re
import string

import numpy as np


def accuracy(predictions, labels) -> dict:
  """Percent of equal items (class indices, strings or tag ids)."""
  if len(predictions) != len(labels):
    raise ValueError(f"{len(predictions)} predictions for {len(labels)} labels")
  return {"accuracy": 100.0 * float(np.mean(
      [p == l for p, l in zip(predictions, labels)]))}


def f1(predictions, labels, positive=1) -> dict:
  """F1 of the `positive` class, plus accuracy."""
  p, l = np.asarray(predictions) == positive, np.asarray(labels) == positive
  tp = float((p & l).sum())
  score = 2 * tp / max(p.sum() + l.sum(), 1)
  return {"f1": 100.0 * score, **accuracy(predictions, labels)}


def _ranks(x: np.ndarray) -> np.ndarray:
  """Ranks with ties averaged (as Spearman needs)."""
  order = np.argsort(x, kind="stable")
  ranks = np.empty(len(x))
  ranks[order] = np.arange(len(x))
  for v in np.unique(x):
    ranks[x == v] = ranks[x == v].mean()
  return ranks


def pearson_spearman(predictions, labels) -> dict:
  """Pearson and Spearman correlations, as STS-B reports them."""
  p, l = np.asarray(predictions, float), np.asarray(labels, float)
  pearson = float(np.corrcoef(p, l)[0, 1])
  spearman = float(np.corrcoef(_ranks(p), _ranks(l))[0, 1])
  return {"pearson": 100 * pearson, "spearman": 100 * spearman}


def _normalize(text: str) -> list[str]:
  """SQuAD's answer normalization: lower, no punctuation or articles."""
  text = "".join(c for c in text.lower() if c not in string.punctuation)
  return re.sub(r"\b(a|an|the)\b", " ", text).split()


def squad(predictions: list[str], answers: list[str]) -> dict:
  """Exact match and token F1 of answer strings."""
  em, f = [], []
  for pred, gold in zip(predictions, answers):
    p, g = _normalize(pred), _normalize(gold)
    em.append(p == g)
    common = sum((collections.Counter(p) & collections.Counter(g)).values())
    f.append(0.0 if not common else
             2 * common / (len(p) + len(g)))
  return {"exact_match": 100 * float(np.mean(em)),
          "f1": 100 * float(np.mean(f))}


def _lcs(a: list[str], b: list[str]) -> int:
  row = [0] * (len(b) + 1)
  for x in a:
    prev = 0
    for j, y in enumerate(b, 1):
      prev, row[j] = row[j], prev + 1 if x == y else max(row[j], row[j - 1])
  return row[-1]


def rouge(predictions: list[str], references: list[str]) -> dict:
  """ROUGE-1, ROUGE-2 and ROUGE-L F-measures over lower-cased words."""
  scores = collections.defaultdict(list)
  for pred, ref in zip(predictions, references):
    p, r = pred.lower().split(), ref.lower().split()
    for n in (1, 2):
      pc = collections.Counter(zip(*[p[i:] for i in range(n)]))
      rc = collections.Counter(zip(*[r[i:] for i in range(n)]))
      overlap = sum((pc & rc).values())
      total = sum(pc.values()) + sum(rc.values())
      scores[f"rouge{n}"].append(2 * overlap / total if total else 0.0)
    lcs = _lcs(p, r)
    scores["rougeL"].append(2 * lcs / (len(p) + len(r)) if p and r else 0.0)
  return {k: 100 * float(np.mean(v)) for k, v in scores.items()}


def compute(metric: str, predictions, labels) -> dict:
  """Metric `metric` (a `Task.metric` name)."""
  fns = {"accuracy": accuracy, "f1": f1, "pearson_spearman": pearson_spearman,
         "squad": squad, "rouge": rouge}
  if metric not in fns:
    raise ValueError(f"unknown metric {metric!r}; known: {sorted(fns)}")
  return fns[metric](predictions, labels)
