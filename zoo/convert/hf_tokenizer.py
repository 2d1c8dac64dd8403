"""Hugging Face tokenizer export: a zoo tokenizer in, a folder out.

    names = zoo.convert.hf_tokenizer.save(tok, "out/")
    hf = transformers.AutoTokenizer.from_pretrained("out/")
    hf(text, add_special_tokens=False)["input_ids"] == tok.encode(text)

The folder holds a fast tokenizer (`tokenizer.json`, built here with the
`tokenizers` library; nothing is converted at load time) and
`tokenizer_config.json` with the special tokens. With specials added,
`hf(text)` gives the row `zoo.load` feeds a model: `text </s>` for
SentencePiece, `[CLS] text [SEP]` for WordPiece, the folder's own
post-processor for a Hugging Face tokenizer.

SentencePiece (T5 layout) becomes a `tokenizers` Unigram over the model's
pieces and scores plus the 100 sentinels on top, with SentencePiece's own
normalisation: the model's precompiled charsmap, words split at spaces only
(runs of spaces, and leading and trailing ones, vanish) and a dummy `▁`
before each word. Every text between two special tokens is a sentence of its
own, as `SentencePieceTokenizer.encode` cuts at `<extra_id_i>`. The specials
are pad `<pad>`, eos `</s>`, unk `<unk>`, mask `<mask>`, cls `<cls>`, sep
`<sep>`, bos `<s>` (the pieces at ids 0-6) and the sentinels `<extra_id_i>`
as additional special tokens. WordPiece keeps the zoo's own `tokenizers`
pipeline (BERT normaliser and pre-tokeniser) with `vocab.txt` beside it; a
Hugging Face tokenizer is written back as it was read.

Where the ids differ:
- By design: transformers matches every special token's text in raw text,
  so a text holding `<pad>`, `</s>`, `<unk>`, `<cls>`, `<sep>`, `<s>` or
  `<mask>` literally gets the special id where
  `SentencePieceTokenizer.encode` spells the text in pieces (its control
  symbols never match raw text). For `<mask>` that is the zoo's own rule
  where it feeds a model (`zoo.load` turns each mask marker into the mask
  id). Sentinels are matched as written, `<extra_id_0>` to `<extra_id_99>`;
  the zoo also reads `<extra_id_03>` as sentinel 3.
- A limit of the `tokenizers` library (every Hugging Face SentencePiece
  tokenizer has it): its `Precompiled` normaliser rewrites text a grapheme
  cluster at a time, and a cluster shorter than 6 UTF-8 bytes that starts
  with a character the charsmap rewrites and goes on with combining marks
  is replaced whole by that first character's rewrite, the marks dropped;
  SentencePiece rewrites character by character and keeps them. E.g.
  U+00A0 U+0301 (no-break space, combining acute), "ﬁ" or a full-width
  letter followed by a combining accent. Text without such clusters (the
  sample's prose, plain accented letters composed or decomposed, emoji)
  gives identical ids.

`model_type` picks `tokenizer_class`: WordPiece is `BertTokenizer` (the
class of every BERT-vocabulary family); SentencePiece and Hugging Face
tokenizers keep the generic `PreTrainedTokenizerFast` for every model type,
since transformers 5's model classes (`T5Tokenizer`, ...) rebuild their own
pipeline on load (T5's splits words at any Unicode space, e.g. U+0085, which
SentencePiece keeps as a character) and the ids would drift.
"""

import json
import pathlib
import re

from data import tokenizer as tok_lib

_CONFIG = "tokenizer_config.json"
_SENTINEL = re.compile(r"<extra_id_(\d+)>")
_HF_NAMES = ("pad", "eos", "unk", "mask", "cls", "sep", "bos")
# A WordPiece vocabulary's classes; any other model type gets the first.
_WORDPIECE_CLASSES = {"distilbert": "DistilBertTokenizer",
                      "electra": "ElectraTokenizer"}


def save(tokenizer, folder, model_type: str | None = None) -> list[str]:
  """Writes `tokenizer` as a Hugging Face tokenizer folder.

  Args:
    tokenizer: a zoo tokenizer (`data.tokenizer`): SentencePiece, WordPiece
      or a Hugging Face folder's.
    folder: the folder to write (created if missing).
    model_type: the model's Hugging Face `model_type` ("t5", "bert", ...);
      it picks `tokenizer_class` (see the module docstring).

  Returns:
    The names of the files written, sorted.

  Raises:
    ValueError: an unknown tokenizer kind, or a SentencePiece model this
      export cannot reproduce.
    ImportError: transformers is not installed.
  """
  kind = getattr(tokenizer, "kind", None)
  builders = {"sentencepiece": _sentencepiece, "wordpiece": _wordpiece,
              "hf": _hugging_face}
  if kind not in builders:
    raise ValueError(f"cannot export a tokenizer of kind {kind!r} "
                     f"({type(tokenizer).__name__}); known kinds: "
                     f"{sorted(builders)}")
  transformers = _transformers()
  backend, specials, extra, config = builders[kind](tokenizer)
  hf = transformers.PreTrainedTokenizerFast(
      tokenizer_object=backend, additional_special_tokens=extra,
      clean_up_tokenization_spaces=False,
      **{f"{k}_token": v for k, v in specials.items()})
  folder = pathlib.Path(folder)
  folder.mkdir(parents=True, exist_ok=True)
  written = {pathlib.Path(p).name for p in hf.save_pretrained(str(folder))}
  path = folder / _CONFIG
  saved = json.loads(path.read_text("utf-8"))
  saved.update(config, tokenizer_class=_class_name(kind, model_type))
  path.write_text(json.dumps(saved, indent=2, ensure_ascii=False) + "\n",
                  "utf-8")
  if kind == "wordpiece":  # for BertTokenizer's slow twin
    (folder / "vocab.txt").write_text("\n".join(tokenizer.vocab) + "\n",
                                      "utf-8")
    written.add("vocab.txt")
  return sorted(n for n in written | {_CONFIG} if (folder / n).exists())


def _transformers():
  """The transformers module, or an ImportError that says how to get it."""
  try:
    import transformers  # pylint: disable=import-outside-toplevel
  except ImportError as e:
    raise ImportError("exporting a Hugging Face tokenizer needs transformers:"
                      " pip install transformers (or the zoo's `test` "
                      "extra)") from e
  return transformers


def _class_name(kind: str, model_type: str | None) -> str:
  """The `tokenizer_class` written for a tokenizer kind and model type."""
  if kind == "wordpiece":
    return _WORDPIECE_CLASSES.get(model_type or "", "BertTokenizer")
  return "PreTrainedTokenizerFast"


def _sentencepiece(tok):
  """(backend, specials, sentinels, config) of a SentencePieceTokenizer."""
  import tokenizers  # pylint: disable=import-outside-toplevel
  from tokenizers import decoders, pre_tokenizers, processors  # pylint: disable=import-outside-toplevel
  from sentencepiece import sentencepiece_model_pb2  # pylint: disable=import-outside-toplevel
  proto = sentencepiece_model_pb2.ModelProto()
  proto.ParseFromString(tok.proto)
  trainer, norm = proto.trainer_spec, proto.normalizer_spec
  _check_spm(trainer, norm)
  sentinels = [f"<extra_id_{i}>" for i in range(tok_lib.NUM_SENTINELS)]
  vocab = [(p.piece, p.score) for p in proto.pieces]
  vocab += [(s, 0.0) for s in reversed(sentinels)]
  backend = tokenizers.Tokenizer(tokenizers.models.Unigram(
      vocab, unk_id=tok.sp.unk_id(), byte_fallback=trainer.byte_fallback))
  if norm.precompiled_charsmap:
    backend.normalizer = tokenizers.normalizers.Precompiled(
        norm.precompiled_charsmap)
  # After the charsmap SentencePiece's only whitespace is " ": words are cut
  # there, runs of spaces vanish and each word opens with a dummy "▁".
  metaspace = dict(replacement="\u2581", prepend_scheme="always", split=True)
  backend.pre_tokenizer = pre_tokenizers.Sequence([
      pre_tokenizers.Split(" ", behavior="removed"),
      pre_tokenizers.Metaspace(**metaspace)])
  backend.decoder = decoders.Metaspace(**metaspace)
  if trainer.byte_fallback:
    backend.decoder = decoders.Sequence([
        decoders.Replace("\u2581", " "), decoders.ByteFallback(),
        decoders.Fuse(), decoders.Strip(" ", 1, 0)])
  ids = tok.specials()
  # mask/cls/sep/bos only where they are control symbols, not pieces
  specials = {k: tok.sp.id_to_piece(ids[k]) for k in _HF_NAMES
              if k in ("pad", "eos", "unk") or tok.sp.is_control(ids[k])}
  eos = specials["eos"]
  backend.post_processor = processors.TemplateProcessing(
      single=f"$A {eos}", pair=f"$A {eos} $B {eos}",
      special_tokens=[(eos, ids["eos"])])
  return backend, specials, sentinels, {"extra_ids": len(sentinels)}


def _check_spm(trainer, norm) -> None:
  """Refuses SentencePiece models whose encoding is not reproduced here."""
  unigram = type(trainer).ModelType.Value("UNIGRAM")
  if trainer.model_type != unigram:
    name = type(trainer).ModelType.Name(trainer.model_type)
    raise ValueError(f"cannot export a SentencePiece {name} model; only "
                     "UNIGRAM models (the zoo's default) are supported")
  got = dict(split_by_whitespace=trainer.split_by_whitespace,
             treat_whitespace_as_suffix=trainer.treat_whitespace_as_suffix,
             add_dummy_prefix=norm.add_dummy_prefix,
             remove_extra_whitespaces=norm.remove_extra_whitespaces)
  wrong = {k: v for k, v in got.items()
           if v != (k != "treat_whitespace_as_suffix")}
  if wrong:
    raise ValueError(f"cannot export a SentencePiece model with {wrong} "
                     "(the zoo trains with the opposite)")


def _wordpiece(tok):
  """(backend, specials, [], config) of a WordPieceTokenizer."""
  import tokenizers  # pylint: disable=import-outside-toplevel
  backend = tokenizers.Tokenizer.from_str(tok._tk.to_str())  # pylint: disable=protected-access
  backend.decoder = tokenizers.decoders.WordPiece(prefix="##")
  backend.post_processor = tokenizers.processors.TemplateProcessing(
      single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
      special_tokens=[("[CLS]", tok.ids["[CLS]"]),
                      ("[SEP]", tok.ids["[SEP]"])])
  ids = tok.specials()
  specials = {k: tok.vocab[ids[k]] for k in _HF_NAMES}
  config = dict(do_lower_case=tok.lower_case, strip_accents=tok.strip_accents,
                tokenize_chinese_chars=tok.chinese_chars)
  return backend, specials, [], config


def _hugging_face(tok):
  """(backend, specials, sentinels, {}) of an HFTokenizer.

  The specials are the zoo's (`specials()`), stand-ins included (BERT's eos
  is its [SEP]), each one that is a special token of the vocabulary; the
  last resort, id 0 for a vocabulary without unk, is left out.
  """
  import tokenizers  # pylint: disable=import-outside-toplevel
  backend = tokenizers.Tokenizer.from_str(tok._tk.to_str())  # pylint: disable=protected-access
  added = {i: str(t) for i, t in backend.get_added_tokens_decoder().items()}
  ids = tok.specials()
  specials = {k: added[ids[k]] for k in _HF_NAMES if ids[k] in added}
  sentinels = [t for t in added.values() if _SENTINEL.fullmatch(t)]
  sentinels.sort(key=lambda t: int(_SENTINEL.fullmatch(t)[1]))
  return backend, specials, sentinels, {}
