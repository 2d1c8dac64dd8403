"""data.knowledge_probe: cloze facts from held-out WordNet hypernyms."""

import numpy as np
import pytest

from data import knowledge_probe
from data import linking
from data import wordnet


@pytest.fixture(scope="module")
def facts(tok):
  return knowledge_probe.facts(linking.linker("wordnet"), tok)


def test_facts_are_held_out_pairs_with_one_piece_answers(facts, tok):
  linker = linking.linker("wordnet")
  kb = linker.kb
  assert len(facts) > 500
  held = wordnet.held_out(kb)
  hyper = kb.relations.index("hypernym")
  pairs = {(kb.synsets[h].lemmas[0], kb.synsets[t].lemmas[0])
           for h, r, t in kb.triples[held].tolist() if r == hyper}
  for f in facts[:200]:
    assert (f.subject, f.answer) in pairs
    assert tok.encode(f" {f.answer}") == [f.answer_id]
    assert linker.link([f.subject])[0] == f.subject_entity + 1
    assert kb.synsets[f.answer_entity].lemmas[0] == f.answer
  assert len({f.subject for f in facts}) == len(facts)
  # No training triple states a probed pair.
  kept = {(h, t) for h, r, t in kb.triples[~held].tolist() if r == hyper}
  assert not kept & {(h, t) for h, r, t in kb.triples[held].tolist()}


def test_seen_facts_are_pairs_transe_trained_on(tok):
  linker = linking.linker("wordnet")
  kb = linker.kb
  seen = knowledge_probe.facts(linker, tok, limit=50, split="seen")
  assert len(seen) == 50
  hyper = kb.relations.index("hypernym")
  kept = {(h, t) for h, r, t in kb.triples[~wordnet.held_out(kb)].tolist()
          if r == hyper}
  assert all((f.subject_entity, f.answer_entity) in kept for f in seen)
  with pytest.raises(ValueError, match="split must be one of"):
    knowledge_probe.facts(linker, tok, split="test")


def test_the_question_reads_naturally():
  f = knowledge_probe.Fact("apple", "fruit", 9)
  assert f.text == "an apple is a kind of <mask>."
  assert knowledge_probe.Fact("dog", "canine", 9).text.startswith("a dog ")


def test_rank_among_the_probe_s_answers_by_hand():
  logits = np.array([[0.0, 5.0, 1.0, 9.0, 2.0],
                     [0.0, 1.0, 3.0, 9.0, 2.0]])
  answers = np.array([2, 4])  # candidates: pieces 2 and 4 only
  # Row 0: piece 2 scores 1, piece 4 scores 2 -> rank 2 (piece 3's 9 and
  # piece 1's 5 are not answers of the probe). Row 1: 2 beats 3 -> rank 2.
  np.testing.assert_array_equal(knowledge_probe.rank(logits, answers),
                                [2, 2])
  np.testing.assert_array_equal(
      knowledge_probe.rank(logits, np.array([4, 2])), [1, 1])


def test_entity_candidates_are_the_distinct_answers_by_hand():
  facts = [knowledge_probe.Fact("a", "x", 9, 1, 40),
           knowledge_probe.Fact("b", "y", 8, 2, 7),
           knowledge_probe.Fact("c", "x", 9, 3, 40)]
  candidates, columns = knowledge_probe.entity_candidates(facts)
  np.testing.assert_array_equal(candidates, [7, 40])
  np.testing.assert_array_equal(columns, [1, 0, 1])


def test_pieces_link_word_by_word_and_skip_special_ones(tok):
  linker = linking.linker("wordnet")
  s = tok.specials()
  ids = tok.encode("a dog is a kind of") + [s["mask"], s["eos"], 0, 0]
  got = linker.link_pieces(tok, ids, [s["mask"], s["eos"], 0])
  dog = ids.index(tok.encode(" dog")[0])  # one piece in the sample's
  assert got[dog] == linker.link(["dog"])[0] > 0
  assert not got[len(ids) - 4:].any()
