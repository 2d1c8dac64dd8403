"""Packing: documents into pretraining rows, examples into seq2seq rows.

Pretraining rows follow the batch contract of DESIGN.md: documents, each
closed by EOS, are concatenated and cut into rows of exactly `seq_len`
tokens (T5's concat-and-split), and every id array is renumbered per row so
it starts at 1 and increases. Text-to-text examples are packed as T5 packs
them: several (inputs, targets) pairs share a row, told apart by segment ids
(1, 2, ...; 0 on padding) with positions restarting at 0 in each segment.
"""

from typing import Iterable

import numpy as np

from data import batch as batch_lib

KEYS = batch_lib.KEYS


def close_document(doc: dict[str, np.ndarray], eos: int) -> dict:
  """`doc` (arrays of `annotate.annotate`) with EOS appended.

  EOS stays in the last sentence, forms a word of its own, is in no phrase,
  no entity mention and no field, and belongs to the document
  (`doc_keys`).
  """
  n = len(doc["tokens"])
  last_sentence = doc["sentence_ids"][-1] if n else 1
  last_word = doc["word_ids"][-1] if n else 0
  key = doc["doc_keys"][-1] if n else 1
  tail = dict(tokens=eos, sentence_ids=last_sentence, word_ids=last_word + 1,
              phrase_ids=0, doc_keys=key, entity_ids=0, field_ids=0)
  doc = dict(doc)
  doc.setdefault("entity_ids", np.zeros(n, np.int32))
  doc.setdefault("field_ids", np.zeros(n, np.int32))
  return {k: np.append(doc[k], np.int32(v)).astype(np.int32)
          for k, v in tail.items()}


def _renumber(ids: np.ndarray, after: int) -> np.ndarray:
  """Shifts increasing ids so the first nonzero one is `after + 1`."""
  nonzero = ids != 0
  if not nonzero.any():
    return ids
  first = ids[np.argmax(nonzero)]
  return np.where(nonzero, ids - first + after + 1, 0).astype(np.int32)


class RowBuilder:
  """Accumulates document pieces into one row of `seq_len` tokens."""

  def __init__(self, seq_len: int):
    self.seq_len = seq_len
    self.row = {k: np.zeros(seq_len, np.int32) for k in KEYS}
    self.fill = 0
    self.last = dict.fromkeys(KEYS, 0)

  @property
  def space(self) -> int:
    """Tokens still free in the row."""
    return self.seq_len - self.fill

  def add(self, doc: dict[str, np.ndarray], start: int, stop: int) -> None:
    """Appends `doc[start:stop]` (a closed document's arrays) as a new doc."""
    n = stop - start
    if n > self.space or n <= 0:
      raise ValueError(f"cannot add {n} tokens to a row with {self.space} free")
    sl = slice(self.fill, self.fill + n)
    self.row["tokens"][sl] = doc["tokens"][start:stop]
    for k in ("doc_keys", "entity_ids", "field_ids"):  # kept as they are
      self.row[k][sl] = doc[k][start:stop]
    self.row["doc_ids"][sl] = self.last["doc_ids"] + 1
    for k in ("sentence_ids", "word_ids", "phrase_ids"):
      self.row[k][sl] = _renumber(doc[k][start:stop], self.last[k])
    for k in ("doc_ids", "sentence_ids", "word_ids", "phrase_ids"):
      self.last[k] = max(self.last[k], int(self.row[k][sl].max()))
    self.fill += n


def pack_documents(docs: Iterable[dict], seq_len: int,
                   eos: int = 1) -> dict[str, np.ndarray]:
  """Packs annotated documents into rows; the last row is zero-padded.

  Args:
    docs: dicts of int32 `[T]` arrays (`tokens`, `sentence_ids`, `word_ids`,
      `phrase_ids`, `doc_keys`, optionally `entity_ids` and `field_ids`)
      without EOS, as
      `annotate.annotate` returns them.
    seq_len: L, the row length.
    eos: id closing each document.

  Returns:
    The contract's int32 `[R, L]` arrays for R rows.
  """
  rows, builder = [], RowBuilder(seq_len)
  for doc in docs:
    doc = close_document(doc, eos)
    start = 0
    while start < len(doc["tokens"]):
      stop = min(len(doc["tokens"]), start + builder.space)
      builder.add(doc, start, stop)
      start = stop
      if not builder.space:
        rows.append(builder.row)
        builder = RowBuilder(seq_len)
  if builder.fill:
    rows.append(builder.row)
  return {k: np.stack([r[k] for r in rows]) if rows else
          np.zeros((0, seq_len), np.int32) for k in KEYS}


def _as_ids(x, tokenizer) -> list[int]:
  if isinstance(x, str):
    if tokenizer is None:
      raise ValueError("pack_seq2seq got text but no tokenizer to encode it")
    return tokenizer.encode(x)
  return [int(i) for i in x]


def _seq2seq_keys(lengths: dict[str, int]) -> list[str]:
  return [f"{s}{x}" for s in lengths for x in ("", "_segment_ids",
                                              "_positions")]


def pack_seq2seq(examples: Iterable[dict], *, inputs_len: int,
                 targets_len: int, tokenizer=None, eos: int = 1,
                 pack: bool = True) -> dict[str, np.ndarray]:
  """T5-style packing of text-to-text examples.

  Each example's `inputs` and `targets` (strings, encoded with `tokenizer`,
  or id sequences) get EOS appended and are truncated to the row lengths
  (keeping EOS). With `pack`, examples fill rows greedily in order, a new
  row starting when either side is full; without it, one example a row.

  Returns:
    int32 arrays: `inputs`, `inputs_segment_ids`, `inputs_positions` of shape
    `[R, S]` (S = inputs_len) and `targets`, `targets_segment_ids`,
    `targets_positions` of shape `[R, T]` (T = targets_len); segment ids are
    1, 2, ... per example in a row and 0 on padding.
  """
  lengths = {"inputs": inputs_len, "targets": targets_len}
  keys = _seq2seq_keys(lengths)
  rows, fill, segment = [], None, 0
  for ex in examples:
    seqs = {s: np.asarray(_as_ids(ex[s], tokenizer)[:cap - 1] + [eos],
                          np.int32) for s, cap in lengths.items()}
    if fill is None or not pack or any(
        fill[s] + len(seqs[s]) > lengths[s] for s in lengths):
      rows.append({k: np.zeros(lengths[k.split("_")[0]], np.int32)
                   for k in keys})
      fill, segment = dict.fromkeys(lengths, 0), 0
    segment += 1
    for s, ids in seqs.items():
      sl = slice(fill[s], fill[s] + len(ids))
      rows[-1][s][sl] = ids
      rows[-1][f"{s}_segment_ids"][sl] = segment
      rows[-1][f"{s}_positions"][sl] = np.arange(len(ids))
      fill[s] += len(ids)
  return {k: np.stack([r[k] for r in rows]) if rows else
          np.zeros((0, lengths[k.split("_")[0]]), np.int32) for k in keys}
