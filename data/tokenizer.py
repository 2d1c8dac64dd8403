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
from typing import Iterable

import numpy as np
import sentencepiece as spm

NUM_SENTINELS = 100
_SPECIAL_IDS = dict(pad=0, eos=1, unk=2, mask=3, cls=4, sep=5, bos=6)
_CONTROL = ["<mask>", "<cls>", "<sep>"]  # ids 3, 4, 5; bos <s> is set to 6
_SENTINEL_RE = re.compile(r"<extra_id_(\d+)>")
_META = "tokenizer.json"
# How a text marks a masked piece for `fill_mask`, whatever the vocabulary.
MASK_MARKERS = ("<mask>", "[MASK]")


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

  def pieces(self) -> list[str]:
    """The text of every id, sentinels (`<extra_id_i>`) included."""
    out = [self.sp.id_to_piece(i) for i in range(self.num_pieces)]
    return out + [f"<extra_id_{NUM_SENTINELS - 1 - i}>"
                  for i in range(NUM_SENTINELS)]

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
  """BERT's WordPiece over a `vocab.txt`, with the same face.

  Built with the `tokenizers` library as the reference's BertTokenizerFast
  builds it: BERT's normaliser (control characters dropped, CJK characters
  split, lower-casing and accent stripping as configured: by default
  lower-cased, accents stripped when lower-cased) and pre-tokeniser, then
  WordPiece. Specials map [PAD]/[UNK]/[CLS]/[SEP]/[MASK]; BERT has no eos
  or bos, so they map to [SEP] and [CLS], and it has no sentinels.
  """

  kind = "wordpiece"

  def __init__(self, vocab: list[str], lower_case: bool | None = True,
               strip_accents: bool | None = None, chinese_chars: bool = True):
    import tokenizers  # pylint: disable=import-outside-toplevel
    self.vocab = vocab
    self.ids = {p: i for i, p in enumerate(vocab)}
    missing = [t for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
               if t not in self.ids]
    if missing:
      raise ValueError(f"vocab.txt lacks the BERT specials {missing}")
    self.vocab_size = len(vocab)
    self.lower_case = True if lower_case is None else bool(lower_case)
    self.strip_accents, self.chinese_chars = strip_accents, chinese_chars
    self.word_start = np.array([not p.startswith("##") for p in vocab], bool)
    tk = tokenizers.Tokenizer(tokenizers.models.WordPiece(
        self.ids, unk_token="[UNK]", max_input_chars_per_word=100))
    tk.normalizer = tokenizers.normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=chinese_chars,
        strip_accents=strip_accents, lowercase=self.lower_case)
    tk.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    tk.add_special_tokens(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    self._tk = tk

  def pieces(self) -> list[str]:
    """The text of every id."""
    return list(self.vocab)

  def encode(self, text: str) -> list[int]:
    """Ids of `text` (no [CLS]/[SEP] added)."""
    return self._tk.encode(text, add_special_tokens=False).ids

  def encode_batch(self, texts: list[str]) -> list[list[int]]:
    """`encode` over a list."""
    return [e.ids for e in self._tk.encode_batch(texts,
                                                 add_special_tokens=False)]

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
    meta = {"kind": self.kind, "lower_case": self.lower_case,
            "strip_accents": self.strip_accents,
            "chinese_chars": self.chinese_chars, **self.specials()}
    (d / _META).write_text(json.dumps(meta))
    return d

  @classmethod
  def from_vocab_file(cls, path, **options) -> "WordPieceTokenizer":
    """Reads a BERT `vocab.txt` (one piece a line). Without `options`, the
    normalisation is a Hugging Face `tokenizer_config.json` beside it
    (`do_lower_case`, `strip_accents`, `tokenize_chinese_chars`), else the
    reference's defaults (lower-cased)."""
    path = pathlib.Path(path)
    lines = path.read_text("utf-8").split("\n")
    while lines and not lines[-1]:
      lines.pop()
    config = path.parent / "tokenizer_config.json"
    if not options and config.exists():
      c = json.loads(config.read_text("utf-8"))
      options = dict(lower_case=c.get("do_lower_case", True),
                     strip_accents=c.get("strip_accents"),
                     chinese_chars=c.get("tokenize_chinese_chars", True))
    return cls(lines, **options)

  @classmethod
  def load(cls, directory) -> "WordPieceTokenizer":
    """Reads a folder written by `save`."""
    meta = json.loads(pathlib.Path(directory, _META).read_text())
    return cls.from_vocab_file(
        pathlib.Path(directory, "vocab.txt"),
        lower_case=meta.get("lower_case", True),
        strip_accents=meta.get("strip_accents"),
        chinese_chars=meta.get("chinese_chars", True))


_HF_SPECIALS = ("pad", "unk", "cls", "sep", "mask", "bos", "eos")
# When a vocabulary lacks one special, the one standing in for it.
_STAND_INS = {"eos": "sep", "sep": "eos", "bos": "cls", "cls": "bos",
              "mask": "unk"}


class HFTokenizer:
  """A Hugging Face folder's own fast tokenizer (`tokenizer.json`), read
  with the `tokenizers` library: exactly the ids the reference gives.

  `row(text)` is the row the reference feeds its model (its post-processor
  adds [CLS]/[SEP], <s>/</s> or </s>); `encode` gives the pieces alone.
  Specials come from `tokenizer_config.json` / `special_tokens_map.json`;
  one a vocabulary lacks takes a stand-in (eos <-> sep, bos <-> cls, mask
  -> unk). T5's `<extra_id_i>` are the sentinels.
  """

  kind = "hf"

  def __init__(self, tokenizer, special_tokens: dict[str, str]):
    self._tk = tokenizer
    self.vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    ids = {k: vocab[t] for k, t in special_tokens.items() if t in vocab}
    for key, other in _STAND_INS.items():
      if ids.get(key) is None:
        ids[key] = ids.get(other)
    for key in _HF_SPECIALS:  # still missing: unk, else id 0
      if ids.get(key) is None:
        ids[key] = ids["unk"] if ids.get("unk") is not None else 0
    self._ids = ids
    self._mask_text = special_tokens.get("mask")
    sentinels = [vocab[t] for t in (f"<extra_id_{i}>" for i in range(1000))
                 if t in vocab]
    self._sentinels = sentinels
    pieces = sorted(vocab, key=vocab.get)
    special = set(tokenizer.get_added_tokens_decoder())
    self.word_start = np.array(
        [o or i in special
         for i, o in enumerate(_opens_word(tokenizer.model, pieces))], bool)

  @classmethod
  def from_folder(cls, folder) -> "HFTokenizer":
    """Reads `tokenizer.json` and the special tokens of a model folder."""
    import tokenizers  # pylint: disable=import-outside-toplevel
    folder = pathlib.Path(folder)
    tokens = {}
    for name in ("special_tokens_map.json", "tokenizer_config.json"):
      path = folder / name
      if path.exists():
        for key, value in json.loads(path.read_text("utf-8")).items():
          if key.endswith("_token") and key[:-6] in _HF_SPECIALS:
            text = value.get("content") if isinstance(value, dict) else value
            tokens.setdefault(key[:-6], text)
    tk = tokenizers.Tokenizer.from_file(str(folder / _META))
    tk.no_padding()  # as the reference loads it: rows pad in the zoo
    tk.no_truncation()
    return cls(tk, tokens)

  def pieces(self) -> list[str]:
    """The text of every id."""
    vocab = self._tk.get_vocab(with_added_tokens=True)
    return sorted(vocab, key=vocab.get)

  def encode(self, text: str) -> list[int]:
    """Ids of `text`, no specials added."""
    return self._tk.encode(text, add_special_tokens=False).ids

  def encode_batch(self, texts: list[str]) -> list[list[int]]:
    """`encode` over a list."""
    return [e.ids for e in self._tk.encode_batch(texts,
                                                 add_special_tokens=False)]

  def row(self, text: str) -> list[int]:
    """The ids the reference feeds the model for `text` (specials added);
    each of `MASK_MARKERS` in the text becomes the vocabulary's mask."""
    for marker in MASK_MARKERS:
      if self._mask_text:
        text = text.replace(marker, self._mask_text)
    return self._tk.encode(text).ids

  def decode(self, ids: Iterable[int]) -> str:
    """Text of ids, specials dropped."""
    return self._tk.decode([int(i) for i in ids], skip_special_tokens=True)

  def specials(self) -> dict:
    """The fields of `objectives.Specials` for this vocabulary."""
    first = self._sentinels[0] if self._sentinels else self.vocab_size - 1
    return dict(vocab_size=self.vocab_size, sentinel0=first,
                num_sentinels=len(self._sentinels),
                **{k: self._ids[k] for k in _HF_SPECIALS})

  def save(self, directory) -> pathlib.Path:
    """Writes `tokenizer.json` and `special_tokens_map.json`."""
    d = pathlib.Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    self._tk.save(str(d / _META))
    vocab = self._tk.get_vocab(with_added_tokens=True)
    names = {i: t for t, i in vocab.items()}
    (d / "special_tokens_map.json").write_text(json.dumps(
        {f"{k}_token": names[i] for k, i in self._ids.items()
         if i is not None}))
    return d


def _opens_word(model, pieces: list[str]) -> list[bool]:
  """Whether each piece of a `tokenizers` model begins a word.

  WordPiece marks the pieces that continue a word (`##`); SentencePiece
  (Unigram or BPE behind a Metaspace) and byte-level BPE mark the ones that
  begin one (`▁`, `Ġ`: the space before the word).
  """
  import tokenizers  # pylint: disable=import-outside-toplevel
  if isinstance(model, tokenizers.models.WordPiece):
    prefix = model.continuing_subword_prefix
    return [not p.startswith(prefix) for p in pieces]
  return [p.startswith(("\u2581", "\u0120")) for p in pieces]


def _is_hf_json(path: pathlib.Path) -> bool:
  """Whether `path` is a Hugging Face fast tokenizer (not the zoo's meta)."""
  try:
    return "model" in json.loads(path.read_text("utf-8"))
  except (OSError, ValueError):
    return False


Tokenizer = SentencePieceTokenizer | WordPieceTokenizer | HFTokenizer


def load_path(path) -> Tokenizer:
  """A tokenizer from a `.model`, a `vocab.txt`, a folder saved by `save`,
  or a Hugging Face model folder (its `tokenizer.json`, else its
  `vocab.txt` and `tokenizer_config.json`)."""
  p = pathlib.Path(path)
  if p.is_dir():
    if (p / "spm.model").exists():
      return SentencePieceTokenizer.load(p)
    if _is_hf_json(p / _META):
      return HFTokenizer.from_folder(p)
    if (p / "vocab.txt").exists():
      return WordPieceTokenizer.load(p) if (p / _META).exists() else (
          WordPieceTokenizer.from_vocab_file(p / "vocab.txt"))
    raise FileNotFoundError(f"{p} holds no tokenizer (spm.model, a Hugging "
                            "Face tokenizer.json or vocab.txt)")
  if not p.exists():
    raise FileNotFoundError(f"tokenizer file {p} does not exist")
  if p.suffix == ".txt":
    return WordPieceTokenizer.from_vocab_file(p)
  return SentencePieceTokenizer(p.read_bytes())
