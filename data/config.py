"""The data config: one comment per field, as in every config of the zoo."""

import os
import pathlib

import ml_collections

REPO = pathlib.Path(__file__).resolve().parent.parent
# How documents become rows (the field `mode`; `data.loader`).
MODES = ("packed", "stream")


def data_dir() -> pathlib.Path:
  """Root of all data files: `$ZOO_DATA_DIR`, else `<repo>/.data`."""
  return pathlib.Path(os.environ.get("ZOO_DATA_DIR") or REPO / ".data")


def default_config() -> ml_collections.ConfigDict:
  """The `data` block of a training config, with its defaults."""
  c = ml_collections.ConfigDict()
  # Where documents come from: "sample" (the embedded corpus, built on first
  # use), "c4" (json.gz shards at `path`), "parallel" (the English-French
  # sentence pairs of `data.parallel`, one pair per document, built on
  # first use; `path` moves its folder), "articles" (the BBC articles of
  # `data.articles` as fields with `field_ids`, built on first use),
  # "speech" (the sample's sentences spoken by espeak-ng, as log-mel frames,
  # `data.speech`: speech batches, built on first use; `path` moves its
  # folder), "tfds" (an array_record TFDS
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
  # How rows are cut, one of `MODES`: "packed" or "stream". Either
  # way row r of every global batch continues row r of the step before (its
  # own share of the documents, concatenated with EOS). "stream" reads every
  # document whole, for models that carry memory across steps
  # (Transformer-XL): `max_doc_rows` does not apply and a checkpoint's data
  # state resumes only in the mode that saved it.
  c.mode = "packed"
  # Documents longer than this many rows are truncated (and counted), so one
  # giant document cannot fill a whole batch ("packed" mode only).
  c.max_doc_rows = 64
  # Where the embedded sample lives; "": `<data_dir()>/sample`.
  c.sample_dir = ""
  # Knowledge-base entities to link in the text ("" none, or "wordnet":
  # WordNet's noun synsets by lemma match, `data.linking`), filling the
  # rows' `entity_ids` (ERNIE's knowledgeable schemes read them).
  c.entities = ""
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


def check_mode(cfg) -> None:
  """Raises ValueError for an unknown `cfg.mode` or a stream of random rows.
  """
  if cfg.mode not in MODES:
    raise ValueError(f"unknown data.mode {cfg.mode!r}; one of {MODES}")
  if cfg.mode == "stream" and cfg.source == "synthetic":
    raise ValueError("data.mode='stream' reads documents in order; the "
                     "synthetic source's rows are independent random rows: "
                     "use source sample, c4 or tfds")
