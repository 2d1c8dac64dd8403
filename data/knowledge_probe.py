"""A knowledge probe from WordNet: cloze questions on held-out hypernyms.

As LAMA (Petroni et al. 2019) asks a masked LM for a relation's object in
a template, each fact here is a WordNet hypernym pair held out of every
training on the knowledge base (`wordnet.held_out`: TransE's vectors never
saw it), asked as

    "a dog is a kind of <mask>."    (answer: "canine")

The subject is the hyponym's first lemma: one word that the entity linker
(`data.linking`) maps back to that synset, so a knowledgeable model reads
its entity. The answer is the hypernym's first lemma, one piece of the
tokenizer (a masked LM fills one piece per mask). A model answers by
ranking the answer pieces of all the probe's facts at the mask (`rank`):
precision at 1 and the mean reciprocal rank over facts. A model that
predicts entities (ERNIE's dEA head) ranks the answers' entities instead
(`entity_candidates`).

The sample's prose may state a fact in words; the probe asks what a model
has of it, whichever way it came. The "seen" split asks instead about
pairs TransE trained on: facts the entity vectors could carry.
"""

import dataclasses

import numpy as np

from data import wordnet

TEMPLATE = "{article} {subject} is a kind of <mask>."


@dataclasses.dataclass(frozen=True)
class Fact:
  """One cloze question: `subject` is a kind of `answer` (`answer_id`: its
  one piece; `subject_entity`, `answer_entity`: their entity numbers in the
  knowledge base, -1 unknown)."""
  subject: str
  answer: str
  answer_id: int
  subject_entity: int = -1
  answer_entity: int = -1

  @property
  def text(self) -> str:
    """The question, with the zoo's `<mask>` marker."""
    article = "an" if self.subject[0] in "aeiou" else "a"
    return TEMPLATE.format(article=article, subject=self.subject)


SPLITS = ("held_out", "seen")


def facts(linker, tokenizer, limit: int | None = None,
          split: str = "held_out") -> list[Fact]:
  """The probe's facts, in the knowledge base's order (one per subject).

  Args:
    linker: a `data.linking.Linker` (its `kb` holds the held-out pairs).
    tokenizer: the tokenizer whose pieces answer.
    limit: keep the first this many.
    split: "held_out", the pairs no training on the knowledge base saw, or
      "seen", pairs TransE trained on (what a model could read out of the
      entity vectors it is given, as LAMA asks of facts its corpus states).
  """
  if split not in SPLITS:
    raise ValueError(f"split must be one of {SPLITS}; got {split!r}")
  kb = linker.kb
  hyper = kb.relations.index("hypernym")
  held = wordnet.held_out(kb)
  rows = kb.triples[(held if split == "held_out" else ~held)
                    & (kb.triples[:, 1] == hyper)]
  out, seen = [], set()
  for h, _, t in rows.tolist():
    subject, answer = kb.synsets[h].lemmas[0], kb.synsets[t].lemmas[0]
    if (" " in subject or " " in answer or subject in seen
        or linker.lemma([subject]) != subject
        or linker.link([subject])[0] != h + 1):
      continue
    pieces = tokenizer.encode(f" {answer}")
    if len(pieces) != 1 or tokenizer.decode(pieces).strip() != answer:
      continue
    seen.add(subject)
    out.append(Fact(subject, answer, int(pieces[0]), h, t))
    if limit is not None and len(out) == limit:
      break
  return out


def entity_candidates(facts: list[Fact]) -> tuple[np.ndarray, np.ndarray]:
  """(int [C]: the probe's distinct answer entities, int [N]: each fact's
  column among them), for ranking entities as `rank` ranks pieces."""
  candidates, columns = np.unique([f.answer_entity for f in facts],
                                  return_inverse=True)
  return candidates, columns


def rank(logits: np.ndarray, answers: np.ndarray) -> np.ndarray:
  """int [N]: the rank (1 = best) of each fact's answer among the probe's
  distinct answer pieces, by the logits at its mask.

  Args:
    logits: float [N, V] at each question's mask.
    answers: int [N] answer piece ids.
  """
  candidates = np.unique(answers)
  scores = logits[:, candidates]
  own = logits[np.arange(len(answers)), answers]
  return 1 + (scores > own[:, None]).sum(axis=1)
