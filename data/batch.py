"""The pretraining batch contract: what `data` yields and every objective reads.

A batch is a dict of int32 arrays `[B, L]` (rows cut from documents that
are concatenated with EOS, T5-style), with the keys `KEYS`:

- `tokens`: ids; 0 = pad; EOS closes each document.
- `doc_ids`: 1, 2, ... per document within the row; 0 on padding.
- `sentence_ids`: 1, 2, ... per sentence within the row; 0 on padding.
- `word_ids`: 1, 2, ... per word; the pieces of one word share an id.
- `phrase_ids`: multi-word units (named entities, phrases) for ERNIE-style
  masking, increasing within the row; 0 = not in a unit.
- `doc_keys`: the identity of each piece's source document, the same in
  every row the document is cut into (a 31-bit hash of its text, never 0;
  0 on padding). `doc_ids` restart in every row, so only `doc_keys` tell
  whether two rows hold pieces of one document (sentence-pair negatives
  must come from another document).
- `entity_ids`: knowledge-base entities linked to the text (`data.linking`,
  with `data.entities`): the entity's id + 1 at the first piece of each
  mention, 0 elsewhere and on padding. Ids of the whole knowledge base,
  never renumbered per row.
- `field_ids`: the field of an article each piece belongs to (`data.source
  = "articles"`: 1 topic, 2 headline, 3 body, markers included), 0 in
  plain text and on padding. Grover's scheme reads them.

`OPTIONAL` keys may be missing from a hand-made batch: `with_defaults`
fills them (no phrases; every (row, doc_ids) a document of its own; no
entities; no fields).

A speech batch (`data.source = "speech"`, the masked acoustic model's) has
the keys `SPEECH_KEYS` instead, one utterance per row, L frames of 10 ms:
- `features`: float32 `[B, L, M]` log-mel frames (`data.audio`),
  normalised per bin; 0 on padding.
- `doc_ids`: int32 `[B, L]`, 1 on the utterance's frames, 0 on padding.
- `phone_ids`: int32 `[B, L]`, each frame's phone class + 1 (from the
  synthesiser's alignment; read by probes, never by pre-training).
- `voice_ids`: int32 `[B, L]`, the utterance's voice + 1 on its frames.
"""

import zlib
from typing import Sequence

import numpy as np

KEYS = ("tokens", "doc_ids", "sentence_ids", "word_ids", "phrase_ids",
        "doc_keys", "entity_ids", "field_ids")
OPTIONAL = ("phrase_ids", "doc_keys", "entity_ids", "field_ids")
_COUNTED = ("doc_ids", "sentence_ids", "word_ids")  # 1, 2, ... per row
SPEECH_KEYS = ("features", "doc_ids", "phone_ids", "voice_ids")


def doc_key(text: str) -> int:
  """The `doc_keys` value of a document: a nonzero 31-bit hash of its text."""
  return (zlib.crc32(text.encode("utf-8")) & 0x7FFFFFFF) or 1


def with_defaults(batch: dict, xp=np) -> dict:
  """`batch` with the `OPTIONAL` keys filled where missing.

  Args:
    batch: the contract's `[B, L]` arrays; `tokens` and `doc_ids` required.
    xp: the array module (numpy or jax.numpy).
  """
  missing = [k for k in KEYS if k not in batch and k not in OPTIONAL]
  if missing:
    raise ValueError(f"the batch lacks {missing}; the contract's keys are "
                     f"{KEYS} ({OPTIONAL} optional)")
  out = dict(batch)
  doc = batch["doc_ids"]
  for key in ("phrase_ids", "entity_ids", "field_ids"):
    if key not in out:
      out[key] = xp.zeros_like(doc)
  if "doc_keys" not in out:
    row = xp.arange(doc.shape[0], dtype=doc.dtype)[:, None]
    out["doc_keys"] = xp.where(doc > 0, row * (doc.shape[1] + 1) + doc, 0)
  return out


def speech_example(seq_len: int, rows: int, n_mels: int
                   ) -> dict[str, np.ndarray]:
  """A speech batch of `rows` full utterances of silence, for shapes."""
  out = {k: np.ones((rows, seq_len), np.int32) for k in SPEECH_KEYS[1:]}
  out["features"] = np.zeros((rows, seq_len, n_mels), np.float32)
  return out


def check_row(row: dict[str, Sequence[int]]) -> None:
  """Raises ValueError naming the first way `row` breaks the contract."""
  tokens = np.asarray(row["tokens"])
  real = tokens != 0
  for k in KEYS:
    ids = np.asarray(row[k])
    if (ids[~real] != 0).any():
      raise ValueError(f"{k} nonzero on padding")
    if k in ("tokens", "doc_keys", "entity_ids", "field_ids"):
      continue
    nz = ids[ids != 0] if k == "phrase_ids" else ids[real]
    if (np.diff(nz) < 0).any():
      raise ValueError(f"{k} decreases within the row")
    if k in _COUNTED and len(nz) and (nz[0] != 1 or (np.diff(nz) > 1).any()):
      raise ValueError(f"{k} does not count 1, 2, ... within the row")
  _check_doc_keys(np.asarray(row["doc_keys"]), np.asarray(row["doc_ids"]),
                  real)
  if real.any() and not real[:real.sum()].all():
    raise ValueError("padding before the end of the row")


def _check_doc_keys(keys, doc, real) -> None:
  if (keys[real] == 0).any():
    raise ValueError("doc_keys zero on a real piece")
  for d in np.unique(doc[real]):
    if len(np.unique(keys[doc == d])) != 1:
      raise ValueError(f"doc_keys differ within document {d} of the row")
