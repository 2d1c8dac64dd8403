"""Tokenizers with one face: SentencePiece (T5 layout) and BERT WordPiece.

Every tokenizer maps text to ids and back and reports the ids of the special
tokens as the fields of `objectives.Specials`. The SentencePiece layout is
T5's: pad 0, eos 1, unk 2, then mask 3, cls 4, sep 5, bos 6 as control
symbols (never matched in raw text), the trained pieces, and 100 sentinels on
top of the vocabulary (sentinel i = vocab_size - 1 - i), written
`<extra_id_i>` in text as T5 writes them.
"""

import io
import json
import logging
import pathlib
import re
import unicodedata
from typing import Iterable

import numpy as np
import sentencepiece as spm

NUM_SENTINELS = 100
_SPECIAL_IDS = dict(pad=0, eos=1, unk=2, mask=3, cls=4, sep=5, bos=6)
_CONTROL = ["<mask>", "<cls>", "<sep>"]  # ids 3, 4, 5; bos <s> is set to 6
_SENTINEL_RE = re.compile(r"<extra_id_(\d+)>")
_META = "tokenizer.json"


class SentencePieceTokenizer:
  """A SentencePiece model plus `NUM_SENTINELS` sentinel ids above it.

  Attributes:
    vocab_size: V, the pieces plus the sentinels.
  """

  kind = "sentencepiece"

  def __init__(self, model_proto: bytes):
    self.proto = model_proto
    self.sp = spm.SentencePieceProcessor(model_proto=model_proto)
    self.num_pieces = self.sp.get_piece_size()
    self.vocab_size = self.num_pieces + NUM_SENTINELS
    pieces = [self.sp.id_to_piece(i) for i in range(self.num_pieces)]
    got = (self.sp.pad_id(), self.sp.eos_id(), self.sp.unk_id())
    if got != (0, 1, 2):
      raise ValueError(f"SentencePiece model has pad/eos/unk at ids {got}; the "
                       "zoo needs 0/1/2 (the T5 layout)")
    if not all(self.sp.is_control(i) for i in range(3, 7)):
      logging.warning("SentencePiece model has no control symbols at ids 3-6:"
                      " mask/cls/sep/bos alias ordinary pieces")
    # A piece opens a word when it carries the whitespace marker; specials
    # and sentinels stand alone as words.
    opens = [p.startswith("\u2581") or self.sp.is_control(i)
             for i, p in enumerate(pieces)]
    self.word_start = np.array(opens + [True] * NUM_SENTINELS, bool)

  def encode(self, text: str) -> list[int]:
    """Ids of `text`; `<extra_id_i>` becomes sentinel i."""
    if "<extra_id_" not in text:
      return self.sp.encode(text)
    ids, last = [], 0
    for m in _SENTINEL_RE.finditer(text):
      ids += self.sp.encode(text[last:m.start()]) + [self.sentinel(int(m[1]))]
      last = m.end()
    return ids + self.sp.encode(text[last:])

  def encode_batch(self, texts: list[str]) -> list[list[int]]:
    """`encode` over a list, in one SentencePiece call when possible."""
    if any("<extra_id_" in t for t in texts):
      return [self.encode(t) for t in texts]
    return self.sp.encode(texts)

  def decode(self, ids: Iterable[int]) -> str:
    """Text of ids; pad and eos are dropped, sentinels become `<extra_id_i>`."""
    out, run = [], []
    for i in (int(i) for i in ids):
      if i >= self.num_pieces:
        out += [self.sp.decode(run), f"<extra_id_{self.vocab_size - 1 - i}>"]
        run = []
      elif i not in (0, 1):
        run.append(i)
    return " ".join(s for s in out + [self.sp.decode(run)] if s)

  def sentinel(self, i: int) -> int:
    """Id of sentinel i."""
    if not 0 <= i < NUM_SENTINELS:
      raise ValueError(f"sentinel {i} outside [0, {NUM_SENTINELS})")
    return self.vocab_size - 1 - i

  def specials(self) -> dict:
    """The fields of `objectives.Specials` for this vocabulary."""
    return dict(vocab_size=self.vocab_size, **_SPECIAL_IDS,
                sentinel0=self.vocab_size - 1, num_sentinels=NUM_SENTINELS)

  def save(self, directory) -> pathlib.Path:
    """Writes `spm.model` and `tokenizer.json` into `directory`."""
    d = pathlib.Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    (d / "spm.model").write_bytes(self.proto)
    (d / _META).write_text(json.dumps({"kind": self.kind, **self.specials()}))
    return d

  @classmethod
  def load(cls, directory) -> "SentencePieceTokenizer":
    """Reads a folder written by `save`."""
    return cls(pathlib.Path(directory, "spm.model").read_bytes())


def train_sentencepiece(lines: Iterable[str], vocab_size: int = 8000,
                        model_type: str = "unigram") -> SentencePieceTokenizer:
  """Trains the T5-layout tokenizer; `vocab_size` counts the sentinels too.

  Deterministic for the same lines (one thread, no sentence sampling).
  """
  if vocab_size <= NUM_SENTINELS + 16:
    raise ValueError(f"vocab_size {vocab_size} leaves no room for pieces")
  model = io.BytesIO()
  spm.SentencePieceTrainer.train(
      sentence_iterator=iter(lines), model_writer=model,
      vocab_size=vocab_size - NUM_SENTINELS, model_type=model_type,
      pad_id=0, eos_id=1, unk_id=2, bos_id=6, control_symbols=_CONTROL,
      character_coverage=1.0, num_threads=1, minloglevel=2,
      shuffle_input_sentence=False, hard_vocab_limit=False)
  return SentencePieceTokenizer(model.getvalue())


class WordPieceTokenizer:
  """BERT's uncased/cased WordPiece over a `vocab.txt`, with the same face.

  Specials map [PAD]/[UNK]/[CLS]/[SEP]/[MASK]; BERT has no eos or bos, so
  they map to [SEP] and [CLS], and it has no sentinels (num_sentinels 0).
  """

  kind = "wordpiece"

  def __init__(self, vocab: list[str], lower_case: bool | None = None):
    self.vocab = vocab
    self.ids = {p: i for i, p in enumerate(vocab)}
    missing = [t for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
               if t not in self.ids]
    if missing:
      raise ValueError(f"vocab.txt lacks the BERT specials {missing}")
    self.vocab_size = len(vocab)
    if lower_case is None:  # a cased vocabulary has capitalised words
      lower_case = not any(p[:1].isupper() for p in vocab[1000:3000])
    self.lower_case = lower_case
    self.word_start = np.array([not p.startswith("##") for p in vocab], bool)

  def _words(self, text: str) -> list[str]:
    text = "".join(" " if unicodedata.category(c)[0] == "C" and c not in "\t\n"
                   else c for c in text)
    if self.lower_case:
      text = "".join(c for c in unicodedata.normalize("NFD", text.lower())
                     if unicodedata.category(c) != "Mn")
    return re.findall(r"\w+|[^\w\s]", text)

  def _word_pieces(self, word: str) -> list[int]:
    out, start = [], 0
    while start < len(word):
      end = len(word)
      while end > start:
        piece = word[start:end] if start == 0 else "##" + word[start:end]
        if piece in self.ids:
          break
        end -= 1
      if end == start:
        return [self.ids["[UNK]"]]
      out.append(self.ids[piece])
      start = end
    return out

  def encode(self, text: str) -> list[int]:
    """Ids of `text` (no [CLS]/[SEP] added)."""
    return [i for w in self._words(text) for i in self._word_pieces(w)]

  def encode_batch(self, texts: list[str]) -> list[list[int]]:
    """`encode` over a list."""
    return [self.encode(t) for t in texts]

  def decode(self, ids: Iterable[int]) -> str:
    """Text of ids with [PAD] dropped and `##` pieces joined."""
    pieces = [self.vocab[int(i)] for i in ids if int(i) != self.ids["[PAD]"]]
    return " ".join(pieces).replace(" ##", "")

  def specials(self) -> dict:
    """The fields of `objectives.Specials` for this vocabulary."""
    i = self.ids
    return dict(vocab_size=self.vocab_size, pad=i["[PAD]"], eos=i["[SEP]"],
                unk=i["[UNK]"], mask=i["[MASK]"], cls=i["[CLS]"],
                sep=i["[SEP]"], bos=i["[CLS]"], sentinel0=self.vocab_size - 1,
                num_sentinels=0)

  def save(self, directory) -> pathlib.Path:
    """Writes `vocab.txt` and `tokenizer.json` into `directory`."""
    d = pathlib.Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    (d / "vocab.txt").write_text("\n".join(self.vocab) + "\n", "utf-8")
    meta = {"kind": self.kind, "lower_case": self.lower_case, **self.specials()}
    (d / _META).write_text(json.dumps(meta))
    return d

  @classmethod
  def from_vocab_file(cls, path, lower_case=None) -> "WordPieceTokenizer":
    """Reads a BERT `vocab.txt` (one piece a line)."""
    lines = pathlib.Path(path).read_text("utf-8").split("\n")
    while lines and not lines[-1]:
      lines.pop()
    return cls(lines, lower_case)

  @classmethod
  def load(cls, directory) -> "WordPieceTokenizer":
    """Reads a folder written by `save`."""
    meta = json.loads(pathlib.Path(directory, _META).read_text())
    return cls.from_vocab_file(pathlib.Path(directory, "vocab.txt"),
                               meta.get("lower_case"))


Tokenizer = SentencePieceTokenizer | WordPieceTokenizer


def load_path(path) -> Tokenizer:
  """A tokenizer from a `.model`, a `vocab.txt` or a folder saved by `save`."""
  p = pathlib.Path(path)
  if p.is_dir():
    if (p / "spm.model").exists():
      return SentencePieceTokenizer.load(p)
    if (p / "vocab.txt").exists():
      return WordPieceTokenizer.load(p) if (p / _META).exists() else (
          WordPieceTokenizer.from_vocab_file(p / "vocab.txt"))
    raise FileNotFoundError(f"{p} holds neither spm.model nor vocab.txt")
  if not p.exists():
    raise FileNotFoundError(f"tokenizer file {p} does not exist")
  if p.suffix == ".txt":
    return WordPieceTokenizer.from_vocab_file(p)
  return SentencePieceTokenizer(p.read_bytes())
