"""Entity linking by lemma match: words of text -> WordNet noun synsets.

ERNIE (Zhang et al. 2019) aligns each entity mention with the entity's
vector at the mention's first token. Here the knowledge base is WordNet's
nouns (`data.wordnet`) and a mention is a run of one to `MAX_WORDS` words
whose lower-cased lemma is a noun lemma of WordNet, matched longest first
from left to right. Words become lemmas by WordNet's own noun detachment
rules (morphy: "dogs" -> "dog", "churches" -> "church", "women" ->
"woman"; a capitalised word, a name such as "Davies", only as it is)
after the punctuation around them is stripped. A lemma links to
its most frequent sense (the first synset of its `index.noun` line).

A single word links only where its noun reading is at least as frequent
as its verb, adjective or adverb readings (the tagged-sense counts of the
index files: "run" and "good" stay unlinked), is not a function word, and
has 3 or more letters ("a", "i" and "it" are noun lemmas of WordNet too).

Linking is a dictionary look-up per word, done where the loader
annotates each document (`data.annotate.annotate(..., linker=)`), on the
pieces' words (`Linker.link_pieces`).
"""

import functools
import pathlib

import numpy as np

from data import sources
from data import wordnet

MAX_WORDS = 3
# Noun detachment rules of WordNet's morphy, in its order.
NOUN_RULES = (("s", ""), ("ses", "s"), ("xes", "x"), ("zes", "z"),
              ("ches", "ch"), ("shes", "sh"), ("men", "man"), ("ies", "y"))
STOP = frozenset("""about above after again against all also and any are
because been before being below between both but can could did does doing
down during each few for from further had has have having her here hers
him his how into its just more most not now off once only other our out
over own same she should some such than that the their them then there
these they this those through too under until very was were what when where
which while who whom why will with would you your yours one two three
first last many much may might must new old way""".split())
_PUNCT = "\"'()[]{}<>.,;:!?*_`~-"


def _index_lines(root: pathlib.Path, pos: str):
  with open(root / f"index.{wordnet.NAMES[pos]}", encoding="utf-8") as f:
    for line in f:
      if not line.startswith("  "):
        yield line.split()


def _tagged(fields: list[str]) -> tuple[int, list[str]]:
  """(tagged sense count, synset offsets) of an index line's fields."""
  pointers = int(fields[3])
  senses = int(fields[2])
  return int(fields[5 + pointers]), fields[6 + pointers:6 + pointers + senses]


def noun_senses(folder=None) -> dict[str, str]:
  """lemma (spaces, lower case) -> key of its first noun synset, for the
  lemmas whose noun reading is at least as frequent as any other part of
  speech's (multi-word lemmas always)."""
  root = pathlib.Path(folder) if folder else (
      sources.npm_dir(wordnet.PACKAGE) / "dict")
  other = {}
  for pos in ("v", "a", "r"):
    for f in _index_lines(root, pos):
      other[f[0]] = max(other.get(f[0], 0), _tagged(f)[0])
  out = {}
  for f in _index_lines(root, "n"):
    tagged, offsets = _tagged(f)
    if "_" in f[0] or tagged >= other.get(f[0], 0):
      out[f[0].replace("_", " ")] = "n" + offsets[0]
  return out


class Linker:
  """Words -> entity ids of a knowledge base's noun synsets.

  Attributes:
    kb: the `wordnet.KnowledgeBase` whose entity ids are returned.
  """

  def __init__(self, kb: wordnet.KnowledgeBase, senses: dict[str, str]):
    self.kb = kb
    self._ids = {}
    for lemma, key in senses.items():
      if " " not in lemma and (len(lemma) < 3 or lemma in STOP):
        continue
      try:
        self._ids[lemma] = kb.entity(key)
      except KeyError:
        continue

  def lemma(self, words: list[str]) -> str | None:
    """The lemma of `words` (stripped, lower case) that is linked, trying
    each noun detachment rule on a lower-case last word, or None."""
    words = [w.strip(_PUNCT) for w in words]
    if not all(words):
      return None
    # A capitalised word (a name: "Davies") is matched as it is.
    rules = NOUN_RULES if words[-1][0].islower() else ()
    words = [w.lower() for w in words]
    head, last = " ".join(words[:-1]), words[-1]
    for suffix, ending in (("", ""),) + rules:
      if last.endswith(suffix) and len(last) > len(suffix):
        stem = last[:len(last) - len(suffix)] + ending
        lemma = f"{head} {stem}" if head else stem
        if lemma in self._ids:
          return lemma
    return None

  def link_pieces(self, tokenizer, ids, special=()) -> np.ndarray:
    """int32 [T]: entity id + 1 at the first piece of each mention in a
    row of piece `ids` (words are runs of pieces from a `word_start`
    piece; words holding a `special` id are never linked), 0 elsewhere."""
    ids = np.asarray(ids, np.int64)
    out = np.zeros(len(ids), np.int32)
    if not len(ids):
      return out
    starts = tokenizer.word_start[ids] | np.isin(ids, special)
    starts[0] = True
    firsts = np.flatnonzero(starts)
    words = ["" if np.isin(w, special).any()  # never linked, nor spanned
             else tokenizer.decode([int(i) for i in w]).strip()
             for w in np.split(ids, firsts[1:])]
    out[firsts] = self.link(words)
    return out

  def link(self, words: list[str]) -> np.ndarray:
    """int32 [W]: entity id + 1 at the first word of each mention, 0
    elsewhere (longest match first, left to right)."""
    out = np.zeros(len(words), np.int32)
    i = 0
    while i < len(words):
      for n in range(min(MAX_WORDS, len(words) - i), 0, -1):
        lemma = self.lemma(words[i:i + n])
        if lemma is not None:
          out[i] = self._ids[lemma] + 1
          i += n
          break
      else:
        i += 1
    return out


KNOWLEDGE_BASES = ("wordnet",)


@functools.lru_cache(maxsize=2)
def linker(name: str) -> Linker | None:
  """The linker of a knowledge base named by the `data.entities` field
  ("wordnet": the installed WordNet's nouns, read once a process), or
  None for ""."""
  if not name:
    return None
  if name not in KNOWLEDGE_BASES:
    raise ValueError(f"unknown knowledge base data.entities={name!r}; use "
                     f"one of {KNOWLEDGE_BASES} or '' (none)")
  return Linker(wordnet.read(pos=("n",)), noun_senses())
