"""The data config: one comment per field, as in every config of the zoo."""

import os
import pathlib

import ml_collections

REPO = pathlib.Path(__file__).resolve().parent.parent


def data_dir() -> pathlib.Path:
  """Root of all data files: `$ZOO_DATA_DIR`, else `<repo>/.data`."""
  return pathlib.Path(os.environ.get("ZOO_DATA_DIR") or REPO / ".data")


def default_config() -> ml_collections.ConfigDict:
  """The `data` block of a training config, with its defaults."""
  c = ml_collections.ConfigDict()
  # Where documents come from: "sample" (the embedded corpus, built on first
  # use), "c4" (json.gz shards at `path`), "tfds" (an array_record TFDS
  # dataset `tfds_name` under `data_dir`) or "synthetic" (random rows).
  c.source = "sample"
  # C4 shards: a folder of `c4-<split>.NNNNN-of-NNNNN.json.gz` files or a glob
  # with `{split}` in it; any path etils.epath opens (gs:// included).
  c.path = ""
  # TFDS dataset name (with optional `:version`) and its data dir.
  c.tfds_name = ""
  c.data_dir = ""
  # The record field holding the document text (C4 and TFDS).
  c.text_key = "text"
  # Vocabulary size, including the 100 sentinels at the top (T5 layout).
  # 8000 suits tiny runs; 32000 is the T5 size.
  c.vocab_size = 8000
  # A SentencePiece `.model`, a BERT `vocab.txt`, a folder saved by
  # `Tokenizer.save`, or "" for the tokenizer trained on the sample.
  c.tokenizer = ""
  # Grain worker processes; 0 reads in the calling process (fastest on 2 cores).
  c.worker_count = 0
  # C4 shards are read in blocks of this many documents, shuffled per block.
  c.shuffle_buffer = 1024
  # Seed of the document order; None: the `seed` given to the loader.
  c.shuffle_seed = ml_collections.FieldReference(None, field_type=int)
  # Passes over the split; 0: forever on "train", once on the other splits.
  c.num_epochs = 0
  # Documents longer than this many rows are truncated (and counted), so one
  # giant document cannot fill a whole batch.
  c.max_doc_rows = 64
  # Where the embedded sample lives; "": `<data_dir()>/sample`.
  c.sample_dir = ""
  return c


def as_config(cfg) -> ml_collections.ConfigDict:
  """`cfg` (ConfigDict, dict or None) over the defaults; unknown keys fail."""
  out = default_config()
  if cfg is None:
    return out
  items = cfg.items() if hasattr(cfg, "items") else dict(cfg).items()
  for key, value in items:
    if key not in out:
      raise ValueError(f"unknown data config field {key!r}; known: "
                       f"{sorted(out.keys())}")
    if key == "shuffle_seed":
      out.shuffle_seed = value
    else:
      out[key] = value
  return out
