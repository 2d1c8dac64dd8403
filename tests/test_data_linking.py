"""data.linking: words to WordNet noun synsets, and the rows' entity_ids."""

import numpy as np
import pytest

import data
from data import annotate
from data import linking
from data import wordnet

# A hand-made index: lemma -> synset key, over a three-synset base.
KB = wordnet.KnowledgeBase(
    (wordnet.Synset("n1", ("dog",), ""), wordnet.Synset("n2", ("new york",), ""),
     wordnet.Synset("n3", ("church",), "")), ("hypernym",),
    np.zeros((0, 3), np.int32))
SENSES = {"dog": "n1", "new york": "n2", "church": "n3", "it": "n1",
          "the": "n1", "new": "n3"}


def test_lemmas_longest_match_first_and_noun_rules():
  linker = linking.Linker(KB, SENSES)
  words = "The dogs of New York, and churches; it ran Dogs.".split()
  # "The" and "it" are function words; "New York," is one mention (at
  # "New"), not "new"; "dogs" and "churches" detach to their lemmas, a
  # capitalised "Dogs" (a name) does not.
  np.testing.assert_array_equal(linker.link(words),
                                [0, 1, 0, 2, 0, 0, 3, 0, 0, 0])


def test_entity_ids_sit_on_each_mention_s_first_piece(tok):
  linker = linking.Linker(KB, SENSES)
  text = "The dogs bark. A church stood there."
  doc = annotate.annotate(tok, text, linker)
  pieces = [tok.decode([int(t)]) for t in doc["tokens"]]
  at = {pieces[i].strip(): int(e) for i, e in enumerate(doc["entity_ids"])
        if e}
  first = [i for i in range(len(pieces)) if doc["word_ids"][i] != (
      doc["word_ids"][i - 1] if i else 0)]
  assert set(np.flatnonzero(doc["entity_ids"])) <= set(first)
  assert sorted(at.values()) == [1, 3]
  plain = annotate.annotate(tok, text)
  assert not plain["entity_ids"].any()
  np.testing.assert_array_equal(plain["tokens"], doc["tokens"])


def test_the_installed_wordnet_links_sample_rows():
  ld = data.pretrain_loader({"source": "sample", "entities": "wordnet"},
                            seq_len=128, batch_size=4, seed=0)
  batch = next(ld)
  linked = batch["entity_ids"] > 0
  # Nouns are common: several mentions a row, never on padding.
  assert linked.sum(1).min() >= 5 and not linked[batch["tokens"] == 0].any()
  kb = linking.linker("wordnet").kb
  assert batch["entity_ids"].max() <= len(kb.synsets)
  plain = next(data.pretrain_loader({"source": "sample"}, seq_len=128,
                                    batch_size=4, seed=0))
  np.testing.assert_array_equal(plain["tokens"], batch["tokens"])
  assert not plain["entity_ids"].any()


def test_an_unknown_knowledge_base_is_named():
  with pytest.raises(ValueError, match="unknown knowledge base"):
    linking.linker("freebase")
