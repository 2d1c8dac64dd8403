"""data.wordnet: WordNet's database files as (head, relation, tail)."""

import numpy as np
import pytest

from data import wordnet

LINE = ("00002137 03 n 02 abstraction 0 abstract_entity 0 003 @ 00001740 n "
        "0000 + 00694095 v 0101 ~ 00023280 n 0000 | a general concept formed "
        "by extracting common features from specific examples  \n")


def test_a_data_line_gives_its_lemmas_gloss_and_pointers():
  synset, pointers = wordnet.parse_line(LINE)
  assert synset.key == "n00002137"
  assert synset.lemmas == ("abstraction", "abstract entity")
  assert synset.gloss.startswith("a general concept formed")
  assert pointers == [("hypernym", "n00001740"), ("derivation", "v00694095"),
                      ("hyponym", "n00023280")]


def test_satellites_count_as_adjectives_and_markers_go():
  line = ("00013887 00 s 01 big(a) 0 001 & 00013442 a 0000 | large  \n")
  synset, pointers = wordnet.parse_line(line)
  assert synset.key == "a00013887" and synset.lemmas == ("big",)
  assert pointers == [("similar_to", "a00013442")]


def test_a_malformed_line_is_named():
  with pytest.raises(ValueError, match="malformed WordNet data line"):
    wordnet.parse_line("00002137 03 n 02 abstraction 0 | cut short")


@pytest.fixture(scope="module")
def nouns():
  return wordnet.read(pos=("n",))


def test_the_installed_nouns_hold_the_hierarchy(nouns):
  assert len(nouns.synsets) > 80_000
  hyper = nouns.relations.index("hypernym")
  hypo = nouns.relations.index("hyponym")
  entity = nouns.entity("n00001740")
  assert nouns.synsets[entity].lemmas == ("entity",)
  physical = nouns.entity("n00001930")
  rows = {tuple(r) for r in nouns.triples.tolist()}
  assert (physical, hyper, entity) in rows
  assert (entity, hypo, physical) in rows
  # Every hypernym edge has its hyponym edge back.
  up = nouns.triples[nouns.triples[:, 1] == hyper]
  down = nouns.triples[nouns.triples[:, 1] == hypo]
  assert len(up) == len(down) > 70_000
  assert {tuple(r) for r in up[:, [2, 0]].tolist()} == {
      tuple(r) for r in down[:, [0, 2]].tolist()}
  # Only noun synsets: pointers to verbs (derivations) are dropped.
  assert nouns.triples.max() < len(nouns.synsets)
  assert all(s.key[0] == "n" for s in nouns.synsets[:100])


def test_held_out_pairs_leave_in_both_directions(nouns):
  out = wordnet.held_out(nouns)
  probed = {nouns.relations.index(r) for r in wordnet.PROBED}
  rel = nouns.triples[:, 1]
  assert not out[~np.isin(rel, list(probed))].any()
  share = out[np.isin(rel, list(probed))].mean()
  assert 0.12 < share < 0.18
  pairs = {frozenset((h, t)) for h, _, t in nouns.triples[out].tolist()}
  kept = {frozenset((h, t)) for h, r, t in nouns.triples[~out].tolist()
          if r in probed}
  assert not pairs & kept
