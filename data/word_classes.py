"""A word-similarity suite built from the corpus: word classes of Brown.

    triples = data.word_classes.triples(tokenizer)   # [(word, same, other)]

Static embeddings put words that play the same part in a sentence near
each other. The suite asks that of a vector space with triples: `word`
and `same` share their part of speech in the Brown corpus's training
files, `other` has another one, and a space passes a triple when
cos(word, same) > cos(word, other). Random vectors pass half of them.

Three rules keep it fair and deterministic:

- a word enters with its dominant universal tag when that tag covers at
  least `purity` of its `min_count` or more tagged occurrences (lower-cased,
  alphabetic; Brown's training split only, the split the sample trains on);
- only the open classes NOUN, VERB, ADJ and ADV, and only words the
  tokenizer keeps whole (one piece), so every family reads the same units;
- triples are drawn with a seeded generator, `n` per class, each class's
  `other` from the three other classes in turn.
"""

import collections
from typing import Iterable

import numpy as np

from data import sources

CLASSES = ("NOUN", "VERB", "ADJ", "ADV")


def tag_counts(sentences: Iterable[tuple[list[str], list[str]]]
               ) -> dict[str, collections.Counter]:
  """word -> Counter of its universal tags, over (words, tags) sentences."""
  out = collections.defaultdict(collections.Counter)
  for words, tags in sentences:
    for word, tag in zip(words, tags):
      if word.isalpha():
        out[word.lower()][tag] += 1
  return out


def lexicon(counts: dict[str, collections.Counter], tokenizer=None,
            min_count: int = 5, purity: float = 0.9) -> dict[str, list[str]]:
  """Class -> its words, sorted: the words of `CLASSES` whose dominant tag
  holds `purity` of their >= `min_count` occurrences, one piece each."""
  out = {c: [] for c in CLASSES}
  for word, tags in counts.items():
    total = sum(tags.values())
    tag, top = tags.most_common(1)[0]
    if tag in out and total >= min_count and top >= purity * total and (
        tokenizer is None or len(tokenizer.encode(" " + word)) == 1):
      out[tag].append(word)
  return {c: sorted(words) for c, words in out.items()}


def triples(tokenizer=None, n: int = 250, seed: int = 0, min_count: int = 5,
            purity: float = 0.9) -> list[tuple[str, str, str]]:
  """`n` (word, same, other) triples per class from Brown's training files.

  Args:
    tokenizer: keeps the words it encodes as one piece (None: all words).
    n: triples per class (4 n in all).
    seed: the draw's seed.
    min_count, purity: the lexicon's rules (module docstring).

  Returns:
    A list of 4 n triples, class by class.
  """
  train = (s for f in sources.brown_files() if f["split"] == "train"
           for s in f["sentences"])
  lex = lexicon(tag_counts(train), tokenizer, min_count, purity)
  small = {c: len(w) for c, w in lex.items() if len(w) < 2}
  if small:
    raise ValueError(f"word classes with fewer than 2 words: {small}")
  rng = np.random.default_rng(seed)
  out = []
  for c in CLASSES:
    others = [o for o in CLASSES if o != c]
    for i in range(n):
      word, same = rng.choice(lex[c], 2, replace=False)
      other = rng.choice(lex[others[i % len(others)]])
      out.append((str(word), str(same), str(other)))
  return out


def passes(vectors: dict[str, np.ndarray],
           suite: list[tuple[str, str, str]]) -> np.ndarray:
  """bool [len(suite)]: cos(word, same) > cos(word, other) per triple.

  Args:
    vectors: word -> float vector [D] (every word of the suite).
    suite: the triples.
  """
  def cos(a, b):
    va, vb = vectors[a], vectors[b]
    return float(va @ vb / max(np.linalg.norm(va) * np.linalg.norm(vb),
                               1e-12))
  return np.array([cos(w, s) > cos(w, o) for w, s, o in suite])


def words(suite: list[tuple[str, str, str]]) -> list[str]:
  """The distinct words of a suite, sorted."""
  return sorted({w for t in suite for w in t})
