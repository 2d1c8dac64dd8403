"""Texts to the rows of ids a loaded model reads (`zoo.load`'s face).

`text_row` feeds a text as the model's training fed its rows: `[cls] text
[sep]` for WordPiece (BERT's convention), `text eos` for SentencePiece,
what the reference feeds for a Hugging Face folder's tokenizer, and for a
family that reads sentence by sentence (`models.reads_sentences`) the
text split and encoded as the sample is (`data.annotate`), with its
sentence numbers. Mask markers (`<mask>`, `[MASK]`) become the mask id.
"""

import numpy as np

from data import annotate
from data import tokenizer as tok_lib

MASK_MARKERS = tok_lib.MASK_MARKERS


def split_masks(text: str) -> list[str]:
  """`text` cut at each mask marker (the parts between masks)."""
  for marker in MASK_MARKERS[1:]:
    text = text.replace(marker, MASK_MARKERS[0])
  return text.split(MASK_MARKERS[0])


def text_row(tok, text: str, sentences: bool = False
             ) -> tuple[list[int], list[int]]:
  """(ids, sentence numbers) of one text; the numbers are all 1 unless
  `sentences` (then 1, 2, ... per sentence, the closing eos in the last)."""
  if hasattr(tok, "row"):  # a Hugging Face folder's own tokenizer
    ids = tok.row(text)
    return ids, [1] * len(ids)
  s = tok.specials()
  if sentences:
    ann = annotate.annotate(tok, text)
    numbers = ann["sentence_ids"].tolist()
    return (ann["tokens"].tolist() + [s["eos"]],
            numbers + [numbers[-1] if numbers else 1])
  pieces = []
  for i, part in enumerate(split_masks(text)):
    pieces += ([s["mask"]] if i else []) + (tok.encode(part) if part else [])
  if getattr(tok, "kind", "") == "wordpiece":
    pieces = [s["cls"]] + pieces + [s["sep"]]
  else:
    pieces = pieces + [s["eos"]]
  return pieces, [1] * len(pieces)


def pad(rows: list[list[int]], length: int, value: int) -> np.ndarray:
  """int32 [B, length]: rows cut at `length` and right-padded with
  `value`."""
  out = np.full((len(rows), length), value, np.int32)
  for i, row in enumerate(rows):
    out[i, :min(len(row), length)] = row[:length]
  return out


def find(tokens: list[int], pieces: list[int], word: str, text: str):
  """(start, length) of the first run of `pieces` inside `tokens`."""
  n = len(pieces)
  for i in range(len(tokens) - n + 1):
    if tokens[i:i + n] == pieces:
      return i, n
  raise ValueError(f"the pieces of {word!r} do not occur in the ids of "
                   f"{text!r} (is it a whole word there?)")
