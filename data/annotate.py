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
  document's `data.batch.doc_key` on every piece) and `entity_ids` (with
  a `data.linking.Linker`: entity id + 1 at each mention's first piece;
  else 0).
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
  return out
