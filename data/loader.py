"""The pretraining loader: a Grain pipeline from documents to contract rows.

    documents (C4 json.gz | TFDS array_record | the sample)
      -> this process's share, shuffled per epoch (seeded)
      -> clean, annotate, tokenize          (`Annotate`)
      -> concatenate with EOS, cut rows    (`Pack`)
      -> batch [B, L]                      (optionally in worker processes)

Its state (`get_state`) is JSON: Grain's iterator state plus the bad-input
counts, and `set_state` resumes exactly. Process i of n reads a disjoint
share of the documents; the shares together are the whole split.
"""

import collections
import logging

from absl import flags
import grain
import numpy as np

from data import annotate as annotate_lib
from data import batch as batch_lib
from data import c4
from data import config as config_lib
from data import packing

# Reasons a document (or part of one) was not used as is; every one counted.
REASONS = ("undecodable", "bad_record", "missing_shard", "truncated_shard",
           "empty", "control_chars", "long_doc_truncated")


def _bad_vector(bad: dict) -> np.ndarray:
  return np.array([bad.get(r, 0) for r in REASONS], np.int32)


class Decode(grain.transforms.Map):
  """A TFDS record (`text_key` bytes) to `{"text", "bad"}`."""

  def __init__(self, text_key: str = "text"):
    self.text_key = text_key

  def map(self, record):
    """`{"text": str | None, "bad": {reason: 1}}` of one record."""
    raw = record.get(self.text_key) if isinstance(record, dict) else None
    if isinstance(raw, str):
      return {"text": raw, "bad": {}}
    if not isinstance(raw, bytes):
      return {"text": None, "bad": {"bad_record": 1}}
    try:
      return {"text": raw.decode("utf-8"), "bad": {}}
    except UnicodeDecodeError:
      return {"text": raw.decode("utf-8", errors="replace"),
              "bad": {"undecodable": 1}}


class Annotate(grain.transforms.Map):
  """`{"text", "bad"}` to the arrays of `annotate.annotate` plus `bad`.

  Control characters are replaced by spaces, an empty document yields no
  tokens, a document over `max_tokens` is truncated; each is counted.
  """

  def __init__(self, tokenizer, max_tokens: int):
    self.tokenizer, self.max_tokens = tokenizer, max_tokens

  def map(self, element):
    """Per-document int32 `[T]` arrays and `bad`, int32 `[len(REASONS)]`."""
    bad = dict(element["bad"])
    text = element["text"]
    empty = {k: np.zeros(0, np.int32) for k in batch_lib.KEYS if k != "doc_ids"}
    if text is None:
      return {**empty, "bad": _bad_vector(bad)}
    text, n_control = annotate_lib.clean(text)
    if n_control:
      bad["control_chars"] = 1
    if not text.strip():
      bad["empty"] = 1
      return {**empty, "bad": _bad_vector(bad)}
    doc = annotate_lib.annotate(self.tokenizer, text)
    if len(doc["tokens"]) > self.max_tokens:
      bad["long_doc_truncated"] = 1
      doc = {k: v[:self.max_tokens] for k, v in doc.items()}
    return {**doc, "bad": _bad_vector(bad)}


class Pack(grain.IterDataset):
  """Annotated documents to rows of `seq_len` tokens (the batch contract).

  Each row also carries `_bad`, int32 `[len(REASONS)]`: the problems met
  while reading the documents since the previous row.
  """

  def __init__(self, parent: grain.IterDataset, seq_len: int, eos: int):
    super().__init__(parent)
    self.seq_len, self.eos = seq_len, eos

  def __iter__(self):
    return PackIterator(self._parent.__iter__(), self.seq_len, self.eos)


class PackIterator(grain.DatasetIterator):
  """State: the parent's state before the current document, and how many of
  its tokens are already in rows. Resuming re-reads that one document."""

  def __init__(self, parent, seq_len: int, eos: int):
    super().__init__(parent)
    self.seq_len, self.eos = seq_len, eos
    self.doc, self.offset = None, 0
    self.doc_state = self._parent.get_state()

  def _next_doc(self) -> np.ndarray:
    """Reads documents until one has tokens; returns the bad counts met."""
    bad = np.zeros(len(REASONS), np.int32)
    while True:
      self.doc_state = self._parent.get_state()
      try:
        element = next(self._parent)
      except StopIteration:
        raise StopIteration(bad) from None  # the counts met on the way out
      bad += element["bad"]
      if len(element["tokens"]):
        self.doc = packing.close_document(element, self.eos)
        self.offset = 0
        return bad

  def __next__(self) -> dict:
    builder = packing.RowBuilder(self.seq_len)
    bad = np.zeros(len(REASONS), np.int32)
    while builder.space:
      if self.doc is None or self.offset >= len(self.doc["tokens"]):
        try:
          bad += self._next_doc()
        except StopIteration as stop:
          self.doc = None
          bad += stop.value if stop.value is not None else 0
          if not builder.fill and not bad.any():
            raise
          break  # a last row, or an all-padding one reporting the last counts
      stop = min(len(self.doc["tokens"]), self.offset + builder.space)
      builder.add(self.doc, self.offset, stop)
      self.offset = stop
    return {**builder.row, "_bad": bad}

  def get_state(self) -> dict:
    """JSON state: `{"parent", "offset", "has_doc"}`."""
    return {"parent": self.doc_state, "offset": self.offset,
            "has_doc": self.doc is not None}

  def set_state(self, state: dict) -> None:
    """Restores the parent and re-reads the current document (uncounted)."""
    self._parent.set_state(state["parent"])
    self.doc_state, self.doc, self.offset = state["parent"], None, 0
    if state["has_doc"]:
      self.doc = packing.close_document(next(self._parent), self.eos)
      self.offset = int(state["offset"])


def documents(cfg, split: str, seed: int, process_index: int = 0,
              process_count: int = 1) -> grain.IterDataset:
  """This process's shuffled share of `split`: `{"text", "bad"}` elements.

  Random-access sources (TFDS, the sample) are sliced `[i::n]` then shuffled
  per epoch; C4 json.gz shards are split by shard (or by line when there are
  fewer shards than processes).
  """
  cfg = config_lib.as_config(cfg)
  if not 0 <= process_index < process_count:
    raise ValueError(f"process_index {process_index} outside "
                     f"[0, {process_count})")
  epochs = cfg.num_epochs or (None if split == "train" else 1)
  seed = seed if cfg.shuffle_seed is None else cfg.shuffle_seed
  if cfg.source == "c4":
    return c4.JsonShards(
        c4.find_shards(cfg.path, split), seed=seed, num_epochs=epochs,
        block=cfg.shuffle_buffer, process_index=process_index,
        process_count=process_count, text_key=cfg.text_key)
  source = _random_access_source(cfg, split)
  ds = grain.MapDataset.source(source)[process_index::process_count]
  if not len(ds):
    raise ValueError(f"split {split!r} has no documents for process "
                     f"{process_index} of {process_count}")
  ds = ds.shuffle(seed=seed % 2**32).repeat(epochs)
  return ds.map(Decode(cfg.text_key)).to_iter_dataset()


def _random_access_source(cfg, split: str):
  """A TFDS array_record data source (the sample's or `cfg.tfds_name`)."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  if cfg.source == "sample":
    from data import sample  # pylint: disable=g-import-not-at-top
    folder = sample.ensure(cfg.sample_dir or None)
    return tfds.builder_from_directory(
        str(sample.tfds_dir(folder))).as_data_source(split=split)
  if cfg.source != "tfds":
    raise ValueError(f"unknown data.source {cfg.source!r}; one of sample, "
                     "c4, tfds, synthetic")
  if not cfg.tfds_name:
    raise ValueError("data.source='tfds' needs data.tfds_name")
  try:
    return tfds.data_source(cfg.tfds_name, split=split,
                            data_dir=cfg.data_dir or None)
  except Exception as e:  # TFDS raises several types for a missing dataset
    raise FileNotFoundError(
        f"TFDS dataset {cfg.tfds_name!r} is not prepared as array_record "
        f"under {cfg.data_dir or '~/tensorflow_datasets'}: prepare it with "
        f"`tfds build {cfg.tfds_name} --file_format=array_record` "
        f"({str(e).splitlines()[0][:200]})") from e


class PretrainLoader:
  """Iterator of contract batches: dicts of int32 `[B, L]` arrays.

  Attributes:
    tokenizer: the tokenizer the ids come from.
    stats: Counter of bad input met so far (reason -> count), see `REASONS`.
  """

  def __init__(self, dataset: grain.IterDataset, tokenizer, batch_size: int,
               seq_len: int):
    self.tokenizer = tokenizer
    self.batch_size, self.seq_len = batch_size, seq_len
    self._dataset = dataset
    self._it = iter(dataset)
    self.stats = collections.Counter()

  def __iter__(self):
    return self

  def __next__(self) -> dict[str, np.ndarray]:
    batch = dict(next(self._it))
    bad = batch.pop("_bad").sum(0)
    new = {r: int(n) for r, n in zip(REASONS, bad) if n}
    if new:
      before = dict(self.stats)
      self.stats.update(new)
      # Log each reason's first occurrence and then at powers of two, so a
      # corpus with many small problems does not flood the log.
      if any((self.stats[r] & (self.stats[r] - 1)) == 0 or
             self.stats[r].bit_length() > before.get(r, 0).bit_length()
             for r in new):
        logging.warning("data: bad input %s (totals %s)", new,
                        dict(self.stats))
    short = self.batch_size - len(batch["tokens"])
    if short:  # the end of a finite split: whole padding rows
      batch = {k: np.pad(v, ((0, short), (0, 0))) for k, v in batch.items()}
    return {k: batch[k].astype(np.int32) for k in batch_lib.KEYS}

  def get_state(self) -> dict:
    """JSON state: Grain's iterator state and the bad-input counts."""
    return {"grain": self._it.get_state(), "stats": dict(self.stats)}

  def set_state(self, state: dict) -> None:
    """Resumes exactly where `get_state` was taken."""
    self._it.set_state(state["grain"])
    self.stats = collections.Counter(state.get("stats", {}))

  def close(self) -> None:
    """Stops worker processes, if any."""
    close = getattr(self._it, "close", None)
    if close:
      close()


def pretrain_loader(cfg, *, seq_len: int, batch_size: int, seed: int,
                    process_index: int = 0, process_count: int = 1,
                    split: str = "train"):
  """The loader of this process: `batch_size` rows of `seq_len` per batch.

  Args:
    cfg: the data config (`default_config()` fields; ConfigDict or dict).
    seq_len: L, tokens per row.
    batch_size: B, this process's share of the global batch.
    seed: seeds the document order (unless `cfg.shuffle_seed` is set).
    process_index, process_count: this process and how many read the split.
    split: "train", "validation", ...

  Returns:
    A `PretrainLoader` (or, for source "synthetic", a `SyntheticLoader`).
  """
  cfg = config_lib.as_config(cfg)
  if cfg.source == "synthetic":
    from data import synthetic  # pylint: disable=g-import-not-at-top
    return synthetic.SyntheticLoader(
        seq_len=seq_len, batch_size=batch_size, seed=seed,
        process_index=process_index, process_count=process_count,
        vocab_size=cfg.vocab_size)
  tokenizer = load_tokenizer(cfg)
  ds = documents(cfg, split, seed, process_index, process_count)
  ds = ds.map(Annotate(tokenizer, cfg.max_doc_rows * seq_len))
  ds = Pack(ds, seq_len, tokenizer.specials()["eos"]).batch(batch_size)
  if cfg.worker_count:
    # Grain reads absl flags in its workers; outside an absl app (tests,
    # notebooks) nobody has parsed them, so take the defaults.
    if not flags.FLAGS.is_parsed():
      flags.FLAGS.mark_as_parsed()
    ds = ds.mp_prefetch(grain.MultiprocessingOptions(
        num_workers=cfg.worker_count))
  return PretrainLoader(ds, tokenizer, batch_size, seq_len)


def load_tokenizer(cfg):
  """The tokenizer `cfg.tokenizer` names, or the sample's (built if needed)."""
  from data import tokenizer as tok_lib  # pylint: disable=g-import-not-at-top
  cfg = config_lib.as_config(cfg)
  if cfg.tokenizer:
    return tok_lib.load_path(cfg.tokenizer)
  from data import sample  # pylint: disable=g-import-not-at-top
  folder = sample.ensure(cfg.sample_dir or None)
  tok = tok_lib.SentencePieceTokenizer.load(folder / "tokenizer")
  if tok.vocab_size != cfg.vocab_size:
    tok = sample.tokenizer_for(folder, cfg.vocab_size)
  return tok
