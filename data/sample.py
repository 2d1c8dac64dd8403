"""The embedded sample: real English prose from packages, laid out like C4.

    python -m data.sample [--dir DIR] [--max_docs N]

builds, once, under `<data_dir()>/sample`:
  c4/        c4-{train,validation}.NNNNN-of-NNNNN.json.gz (the C4 schema)
  tfds/      the same documents as a TFDS array_record dataset
  tokenizer/ the T5-layout SentencePiece tokenizer trained on train
  BUILT      a stamp naming the build; present = nothing to do

The prose is the training share of the BBC articles and of the Brown corpus
files (`sources.bucket`): every article or file a downstream task evaluates
on is held out. The build is deterministic (sorted inputs, hash splits,
gzip without timestamps, single-threaded SentencePiece).
"""

import argparse
import hashlib
import json
import logging
import os
import pathlib
import shutil

from data import c4
from data import config
from data import sources
from data import tokenizer as tok_lib

VERSION = "2"
_STAMP = "BUILT"
_TIMESTAMP = "2019-04-01T00:00:00Z"  # C4's records all carry one


def default_dir() -> pathlib.Path:
  """`<data_dir()>/sample`."""
  return config.data_dir() / "sample"


def collect(max_docs: int | None = None) -> list[dict]:
  """C4-schema records of the held-in prose, in a fixed order."""
  records = []
  for a in sources.bbc_articles():
    if a["split"] == "train":
      records.append(dict(text=f"{a['headline']}\n{a['body']}",
                          url=f"bbc://{a['id']}", timestamp=_TIMESTAMP))
  for f in sources.brown_files():
    if f["split"] == "train":
      text = "\n".join(sources.detokenize(w) for w, _ in f["sentences"])
      records.append(dict(text=text, url=f"brown://{f['id']}",
                          timestamp=_TIMESTAMP))
  if max_docs:  # interleave sources so a small sample keeps both
    records = records[::max(1, len(records) // max_docs)][:max_docs]
  return records


def split_of(record: dict) -> str:
  """5% of documents, by url hash, form the validation split."""
  h = int(hashlib.sha256(record["url"].encode()).hexdigest()[:8], 16)
  return "validation" if h % 20 == 0 else "train"


def build(folder=None, max_docs: int | None = None, vocab_size: int = 8000,
          model_type: str = "unigram") -> pathlib.Path:
  """Builds the sample into `folder` unless its stamp says it is built."""
  folder = pathlib.Path(folder or default_dir())
  stamp = dict(version=VERSION, max_docs=max_docs, vocab_size=vocab_size,
               model_type=model_type)
  if _read_stamp(folder) == stamp:
    return folder
  if folder.exists():
    shutil.rmtree(folder)
  logging.warning("building the embedded sample in %s", folder)
  # A private temporary folder, renamed into place at the end: two processes
  # that build at once (parallel tests) cannot see each other's halves.
  tmp = folder.with_name(f"{folder.name}.tmp{os.getpid()}")
  shutil.rmtree(tmp, ignore_errors=True)
  records = collect(max_docs)
  splits = {s: [r for r in records if split_of(r) == s]
            for s in ("train", "validation")}
  for split, recs in splits.items():
    c4.write_shards(recs, tmp / "c4", split, 4 if split == "train" else 1)
  lines = [line for r in splits["train"] for line in r["text"].split("\n")]
  tok = tok_lib.train_sentencepiece(lines, vocab_size, model_type)
  tok.save(tmp / "tokenizer")
  from data import tfds_sample  # pylint: disable=g-import-not-at-top
  tfds_sample.prepare(tmp / "c4", tmp / "tfds")
  counts = {s: len(r) for s, r in splits.items()}
  (tmp / _STAMP).write_text(json.dumps({**stamp, "documents": counts}))
  try:
    tmp.rename(folder)
  except OSError:  # another process finished first; its build is the same
    shutil.rmtree(tmp)
  return folder


def _read_stamp(folder: pathlib.Path) -> dict | None:
  try:
    stamp = json.loads((folder / _STAMP).read_text())
  except (FileNotFoundError, ValueError):
    return None
  stamp.pop("documents", None)
  return stamp


def ensure(folder=None) -> pathlib.Path:
  """The sample folder, built first if it is not there yet."""
  folder = pathlib.Path(folder or default_dir())
  if (folder / _STAMP).exists():
    return folder
  return build(folder)


def tfds_dir(folder) -> pathlib.Path:
  """The sample's TFDS version folder, for `tfds.builder_from_directory`."""
  return pathlib.Path(folder) / "tfds" / "zoo_c4_sample" / "1.0.0"


def tokenizer_for(folder, vocab_size: int) -> tok_lib.SentencePieceTokenizer:
  """The sample's tokenizer at another vocabulary size (trained once)."""
  out = pathlib.Path(folder) / f"tokenizer-{vocab_size}"
  if not (out / "spm.model").exists():
    paths = sorted((pathlib.Path(folder) / "c4").glob("c4-train.*.json.gz"))
    lines = [line for p in paths for r in _records(p)
             for line in r["text"].split("\n")]
    # Saved aside, then renamed: a concurrent process sees all or nothing.
    tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")
    tok_lib.train_sentencepiece(lines, vocab_size).save(tmp)
    try:
      tmp.rename(out)
    except OSError:  # another process finished first; its model is the same
      shutil.rmtree(tmp)
  return tok_lib.SentencePieceTokenizer.load(out)


def train_token_count(folder, tokenizer) -> int:
  """Tokens of one pass over the training split as the loader packs it:
  each document's pieces (split into sentences, as `annotate` does) plus
  its closing EOS. Counted once per tokenizer, then read from a cache file
  in the sample folder."""
  from data import annotate  # pylint: disable=g-import-not-at-top
  proto = getattr(tokenizer, "proto", b"") or repr(tokenizer.vocab_size).encode()
  key = hashlib.sha256(proto).hexdigest()[:12]
  cache = pathlib.Path(folder) / f"train-tokens-{key}.json"
  if cache.exists():
    return int(json.loads(cache.read_text())["tokens"])
  paths = sorted((pathlib.Path(folder) / "c4").glob("c4-train.*.json.gz"))
  total = 0
  for path in paths:
    for record in _records(path):
      text, _ = annotate.clean(record["text"])
      if text.strip():
        total += len(annotate.annotate(tokenizer, text)["tokens"]) + 1
  tmp = cache.with_suffix(f".tmp{os.getpid()}")
  tmp.write_text(json.dumps({"tokens": total}))
  os.replace(tmp, cache)
  return total


def _records(path: pathlib.Path) -> list[dict]:
  import gzip  # pylint: disable=g-import-not-at-top
  with gzip.open(path, "rt", encoding="utf-8") as f:
    return [json.loads(line) for line in f]


def main(argv=None) -> None:
  """`python -m data.sample`: builds the sample unless it is built."""
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--dir", default=None, help="default: <data_dir>/sample")
  parser.add_argument("--max_docs", type=int, default=None)
  parser.add_argument("--vocab_size", type=int, default=8000)
  args = parser.parse_args(argv)
  folder = build(args.dir, args.max_docs, args.vocab_size)
  print(f"sample ready at {folder}: {(folder / _STAMP).read_text()}")


if __name__ == "__main__":
  main()
