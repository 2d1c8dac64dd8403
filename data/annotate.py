"""Row annotations: sentences, words and phrase units of one document.

Sentences come from a rule-based splitter, words from the tokenizer's
word-start marker (SentencePiece `▁`, WordPiece's absence of `##`), and
phrases from runs of capitalised words ("Time Warner", "Bank of England"),
the cheap stand-in for the named-entity units ERNIE masks whole.
"""

import re

import numpy as np

from data import batch as batch_lib

# Abbreviations after which a period does not end a sentence.
_ABBREV = frozenset("""mr mrs ms dr prof st sr jr vs etc inc ltd co corp gov
sen rep gen col lt sgt capt no vol fig jan feb mar apr jun jul aug sep sept
oct nov dec mt ft e.g i.e u.s u.k a.m p.m""".split())
_BOUNDARY = re.compile(r"""(?<=[.!?])["')\]]*\s+(?=["'(\[]?[A-Z0-9])""")
_CONNECT = frozenset(["of", "de", "von", "van", "the", "and", "for"])
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def clean(text: str) -> tuple[str, int]:
  """`text` without control characters (kept: tab, newlines) and their count."""
  out, n = _CONTROL.subn(" ", text)
  return out, n


def split_sentences(text: str) -> list[str]:
  """Sentences of `text`: newlines always split, `.!?` before a capital too."""
  out = []
  for para in text.split("\n"):
    start = 0
    for m in _BOUNDARY.finditer(para):
      words = para[start:m.start()].split()
      last = words[-1].rstrip(".!?\"')]").lower() if words else ""
      if last in _ABBREV or (len(last) == 1 and last.isalpha()):
        continue
      out.append(para[start:m.start()])
      start = m.end()
    out.append(para[start:])
  return [s.strip() for s in out if s.strip()]


def phrase_spans(words: list[str]) -> list[tuple[int, int]]:
  """`[start, end)` word spans of capitalised runs of two or more words.

  Lower-case connectors ("of", "the") may join two capitalised words; the
  first word of a sentence joins only a run that continues after it.
  """
  caps = [w[:1].isupper() and any(c.isalpha() for c in w) for w in words]
  spans, i = [], 0
  while i < len(words):
    if not caps[i]:
      i += 1
      continue
    j = i + 1
    while j < len(words) and (caps[j] or (
        words[j] in _CONNECT and j + 1 < len(words) and caps[j + 1])):
      j += 1
    if j - i >= 2:
      spans.append((i, j))
    i = j
  return spans


def annotate(tokenizer, text: str, linker=None) -> dict[str, np.ndarray]:
  """Ids and annotations of one document (EOS not added).

  Returns int32 arrays of one length T: `tokens`, `sentence_ids` (1, 2, ...),
  `word_ids` (1, 2, ...; pieces of one word share an id), `phrase_ids`
  (a fresh id per phrase unit; 0 outside units), `doc_keys` (the
  document's `data.batch.doc_key` on every piece), `entity_ids` (with
  a `data.linking.Linker`: entity id + 1 at each mention's first piece;
  else 0) and `field_ids` (0: plain text has no fields; `annotate_fields`).
  """
  sentences = split_sentences(text)
  encoded = tokenizer.encode_batch(sentences)
  parts = {k: [] for k in ("tokens", "sentence_ids", "word_ids", "phrase_ids",
                           "entity_ids")}
  words_before, phrases_before = 0, 0
  for s, (sentence, ids) in enumerate(zip(sentences, encoded), 1):
    ids = np.asarray(ids, np.int32)
    starts = tokenizer.word_start[ids]
    if len(ids):
      starts[0] = True  # a sentence always opens a word
    local = np.cumsum(starts)  # 1-based word index within the sentence
    phrase = np.zeros(len(ids), np.int32)
    words = sentence.split()
    if len(words) == (local[-1] if len(ids) else 0):
      for k, (a, b) in enumerate(phrase_spans(words), 1):
        phrase[(local > a) & (local <= b)] = phrases_before + k
      phrases_before += len(phrase_spans(words))
    parts["tokens"].append(ids)
    parts["sentence_ids"].append(np.full(len(ids), s, np.int32))
    parts["word_ids"].append((local + words_before).astype(np.int32))
    parts["phrase_ids"].append(phrase)
    parts["entity_ids"].append(np.zeros(len(ids), np.int32) if linker is None
                               else linker.link_pieces(tokenizer, ids))
    words_before += int(local[-1]) if len(ids) else 0
  out = {k: (np.concatenate(v).astype(np.int32) if v else
             np.zeros(0, np.int32)) for k, v in parts.items()}
  out["doc_keys"] = np.full(len(out["tokens"]), batch_lib.doc_key(text),
                            np.int32)
  out["field_ids"] = np.zeros(len(out["tokens"]), np.int32)
  return out


def annotate_fields(tokenizer, text: str, markers, linker=None
                    ) -> dict[str, np.ndarray]:
  """`annotate` of a document of F fields, each wrapped in its markers.

  Line i < F - 1 of `text` is field i + 1, the rest field F (a body of
  paragraphs). Field f reads `[begin_f] pieces [end_f]` with `field_ids`
  f on all of them; its sentences, words and phrases number on from the
  field before; a marker is a word of its own in the sentence it borders.

  Args:
    tokenizer, text, linker: as `annotate`.
    markers: F (begin, end) id pairs (`data.articles.markers`).
  """
  lines = text.split("\n")
  n = len(markers)
  parts = lines[:n - 1] + ["\n".join(lines[n - 1:])]
  parts += [""] * (n - len(parts))
  out, last = [], dict(sentence_ids=0, word_ids=0, phrase_ids=0)
  for f, (part, (begin, end)) in enumerate(zip(parts, markers), 1):
    doc = annotate(tokenizer, part, linker)
    k = len(doc["tokens"])
    sent = doc["sentence_ids"] + last["sentence_ids"]
    first_s = sent[0] if k else last["sentence_ids"] + 1
    piece = dict(
        tokens=[begin, *doc["tokens"], end],
        sentence_ids=[first_s, *sent, sent[-1] if k else first_s],
        word_ids=[last["word_ids"] + 1,
                  *(doc["word_ids"] + last["word_ids"] + 1),
                  last["word_ids"] + (doc["word_ids"][-1] if k else 0) + 2],
        phrase_ids=[0, *np.where(doc["phrase_ids"] > 0, doc["phrase_ids"]
                                 + last["phrase_ids"], 0), 0],
        entity_ids=[0, *doc["entity_ids"], 0], field_ids=[f] * (k + 2))
    piece = {key: np.asarray(v, np.int32) for key, v in piece.items()}
    for key in last:
      last[key] = max(last[key], int(piece[key].max()))
    out.append(piece)
  joined = {key: np.concatenate([p[key] for p in out]) for key in out[0]}
  joined["doc_keys"] = np.full(len(joined["tokens"]),
                               batch_lib.doc_key(text), np.int32)
  return joined
