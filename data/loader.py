"""The pretraining loader: a Grain pipeline from documents to contract rows.

    documents (`data.documents`: C4 json.gz | TFDS array_record | the sample)
      -> shuffled per epoch (seeded); share r of G for global row r
      -> clean, annotate, tokenize          (`Annotate`)
      -> concatenate with EOS, cut rows    (`Pack`, one per share)
      -> a row of each share in turn       (`Slots`, optionally in workers)
      -> batch [B, L]                      (`PretrainLoader`)

Row r of every global batch of G rows comes from its own share r of G of
the documents, packed on its own (`Slots`), so the global batch of each
step depends on the seed and the step only: a process reads just the rows
it feeds, and 1 process or 64 see the same batches. The state (`get_state`)
is JSON, keyed by global row, so a run resumes exactly, even on another
number of processes (`restore`).

Row r of step t + 1 therefore continues exactly where row r of step t
stopped, in either mode (`data.config.MODES`): "packed" truncates
documents longer than `max_doc_rows` rows, "stream" reads every document
whole, for models that carry memory from one step to the next
(Transformer-XL). The state names its mode; a state resumes only in the
mode that saved it.
"""

import collections
import logging

from absl import flags
import grain
import numpy as np

from data import annotate as annotate_lib
from data import linking
from data import batch as batch_lib
from data import config as config_lib
from data import documents as documents_lib
from data import packing

class Annotate(grain.transforms.Map):
  """`{"text", "bad"}` to the arrays of `annotate.annotate` plus `bad`
  (with `fields`, the (begin, end) markers of each field of an article:
  `annotate.annotate_fields`).

  Control characters are replaced by spaces, an empty document yields no
  tokens, a document over `max_tokens` (None: no limit) is truncated; each
  is counted.
  """

  def __init__(self, tokenizer, max_tokens: int | None, linker=None,
               fields=None):
    self.tokenizer, self.max_tokens = tokenizer, max_tokens
    self.linker, self.fields = linker, fields

  def map(self, element):
    """Per-document int32 `[T]` arrays and `bad`, int32 [len(REASONS)]
    (`data.documents.REASONS`)."""
    bad = dict(element["bad"])
    text = element["text"]
    empty = {k: np.zeros(0, np.int32) for k in batch_lib.KEYS if k != "doc_ids"}
    if text is None:
      return {**empty, "bad": documents_lib.bad_vector(bad)}
    text, n_control = annotate_lib.clean(text)
    if n_control:
      bad["control_chars"] = 1
    if not text.strip():
      bad["empty"] = 1
      return {**empty, "bad": documents_lib.bad_vector(bad)}
    if self.fields is None:
      doc = annotate_lib.annotate(self.tokenizer, text, self.linker)
    else:
      doc = annotate_lib.annotate_fields(self.tokenizer, text, self.fields,
                                         self.linker)
    if self.max_tokens is not None and len(doc["tokens"]) > self.max_tokens:
      bad["long_doc_truncated"] = 1
      doc = {k: v[:self.max_tokens] for k, v in doc.items()}
    return {**doc, "bad": documents_lib.bad_vector(bad)}


class Pack(grain.IterDataset):
  """Annotated documents to rows of `seq_len` tokens (the batch contract).

  Each row also carries `_bad`, int32 [len(REASONS)]: the problems met
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
    bad = np.zeros(len(documents_lib.REASONS), np.int32)
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
    bad = np.zeros(len(documents_lib.REASONS), np.int32)
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


class Slots(grain.IterDataset):
  """Packed rows of several streams in turn: one row of each, then again.

  `streams` maps a global row index r (0 <= r < G, the global batch size)
  to an `IterDataset` of packed rows: share r of G of the documents. Row
  s * len(streams) + k of this dataset is the s-th row of the k-th stream,
  so the global batch of step s holds the s-th row of every share, whoever
  reads it. A stream that ends gives padding rows until all have.
  """

  def __init__(self, streams: dict[int, grain.IterDataset], seq_len: int):
    super().__init__(list(streams.values()))
    self.streams, self.seq_len = dict(streams), seq_len

  def set_slice(self, sl: slice, sequential_slice: bool = False) -> None:
    """Keeps every `sl.step`-th stream (Grain worker sharding)."""
    del sequential_slice
    keep = list(self.streams)[sl]
    self.streams = {r: self.streams[r] for r in keep}

  def __iter__(self) -> "SlotsIterator":
    return SlotsIterator(self)


class SlotsIterator(grain.DatasetIterator):
  """Iterator of `Slots`. State: the next turn and each stream's state,
  keyed by global row, so that any process can take any row over."""

  def __init__(self, ds: Slots):
    self.its = {r: iter(s) for r, s in ds.streams.items()}
    super().__init__(list(self.its.values()))
    self.rows, self.turn, self.done = list(self.its), 0, set()
    self.pad = {k: np.zeros(ds.seq_len, np.int32) for k in batch_lib.KEYS}
    self.pad["_bad"] = np.zeros(len(documents_lib.REASONS), np.int32)

  def __next__(self) -> dict:
    if self.turn == 0 and len(self.done) == len(self.rows):
      raise StopIteration
    row = self.rows[self.turn]
    self.turn = (self.turn + 1) % len(self.rows)
    if row not in self.done:
      try:
        return next(self.its[row])
      except StopIteration:
        self.done.add(row)
    return self.pad

  def get_state(self) -> dict:
    """JSON state: `{"turn", "rows": {row: {"state", "done"}}}`."""
    return {"turn": self.turn,
            "rows": {str(r): {"state": it.get_state(), "done": r in self.done}
                     for r, it in self.its.items()}}

  def set_state(self, state: dict) -> None:
    """Restores every stream of this iterator from `state["rows"]`."""
    missing = [r for r in self.rows if str(r) not in state["rows"]]
    if missing:
      raise ValueError(f"the data state has no rows {missing[:8]}: it was "
                       "saved with a different global batch size")
    self.turn, self.done = int(state["turn"]), set()
    for r, it in self.its.items():
      it.set_state(state["rows"][str(r)]["state"])
      if state["rows"][str(r)]["done"]:
        self.done.add(r)


class PretrainLoader:
  """Iterator of contract batches: dicts of int32 `[B, L]` arrays.

  Attributes:
    tokenizer: the tokenizer the ids come from.
    rows: the global rows this process reads, in the order of its batch.
    mode: how the rows were cut, one of `data.config.MODES`.
    stats: Counter of bad input met so far (reason -> count), see `REASONS`.
  """

  def __init__(self, dataset: grain.IterDataset, tokenizer, rows, seq_len,
               process: tuple[int, int] = (0, 1), workers: bool = False,
               mode: str = "packed"):
    self.tokenizer, self.rows, self.seq_len = tokenizer, list(rows), seq_len
    self.mode = mode
    self.batch_size, self.process = len(self.rows), process
    self.state_key = "grain" if workers else "slots"  # whose state it is
    self._it = iter(dataset)
    self.stats = collections.Counter()
    self.step = 0  # batches read

  def __iter__(self):
    return self

  def __next__(self) -> dict[str, np.ndarray]:
    # `Slots` ends only between whole turns, so a batch is all or nothing.
    rows = [r for _, r in zip(range(self.batch_size), self._it)]
    if not rows:
      raise StopIteration
    self._count(np.sum([r["_bad"] for r in rows], axis=0))
    self.step += 1
    return {k: np.stack([r[k] for r in rows]).astype(np.int32)
            for k in batch_lib.KEYS}

  def _count(self, bad: np.ndarray) -> None:
    """Adds a batch's bad-input counts; logs each reason now and then."""
    new = {r: int(n) for r, n in zip(documents_lib.REASONS, bad) if n}
    if not new:
      return
    before = dict(self.stats)
    self.stats.update(new)
    # Each reason's first occurrence, then at powers of two, so a corpus
    # with many small problems does not flood the log.
    if any(self.stats[r].bit_length() > before.get(r, 0).bit_length()
           for r in new):
      logging.warning("data: bad input %s (totals %s)", new, dict(self.stats))

  def get_state(self) -> dict:
    """JSON state: the streams' states (or Grain's; each row's place in
    its stream), the bad counts, the batches read (`step`) and the mode."""
    return {self.state_key: self._it.get_state(), "stats": dict(self.stats),
            "step": self.step, "mode": self.mode}

  def set_state(self, state: dict) -> None:
    """Resumes exactly where `get_state` was taken (in the same mode)."""
    saved = state.get("mode", "packed")  # states older than the modes
    if saved != self.mode:
      raise ValueError(
          f"this data state was saved in data.mode={saved!r}; its rows "
          f"cannot continue in data.mode={self.mode!r} (documents are cut "
          f"differently): resume with data.mode={saved!r}")
    self._it.set_state(state[self.state_key])
    self.stats = collections.Counter(state.get("stats", {}))
    self.step = int(state.get("step", 0))

  def restore(self, states: list[dict]) -> None:
    """Resumes from the states of every process of a run (`states[i]`
    from process i), saved with any number of processes.

    Rows are addressed globally, so this process takes its rows from
    whichever state holds them. The bad-input counts go to the first
    process. A state of Grain worker processes resumes only on as many
    processes as saved it.
    """
    if all("slots" in s for s in states):
      rows = {r: v for s in states for r, v in s["slots"]["rows"].items()}
      self.set_state({"slots": {"turn": 0, "rows": rows},
                      "stats": self._stats_of(states),
                      "step": states[0].get("step", 0),
                      "mode": states[0].get("mode", "packed")})
    elif len(states) == self.process[1]:
      self.set_state(states[self.process[0]])
    else:
      raise ValueError(
          f"this data state was saved by {len(states)} processes reading "
          "with Grain workers (data.worker_count > 0), whose state is per "
          f"process: resume it on {len(states)} processes, not "
          f"{self.process[1]}")

  def _stats_of(self, states) -> dict:
    """This process's bad-input counts: its own on as many processes as
    saved them, else all of them on the first process."""
    index, count = self.process
    if len(states) == count:
      return states[index].get("stats", {})
    total = collections.Counter()
    for s in states if index == 0 else ():
      total.update(s.get("stats", {}))
    return total

  def close(self) -> None:
    """Stops worker processes, if any."""
    close = getattr(self._it, "close", None)
    if close:
      close()


def pretrain_loader(cfg, *, seq_len: int, batch_size: int, seed: int,
                    process_index: int = 0, process_count: int = 1,
                    split: str = "train", rows=None):
  """The loader of this process: its `batch_size` rows of each global batch.

  Row r of the global batch (G = batch_size * process_count rows) is
  always the next packed row of share r of G of the documents, so the
  global batch of every step is a function of the seed and the step only,
  never of how many processes read it.

  Args:
    cfg: the data config (`default_config()` fields; ConfigDict or dict).
    seq_len: L, tokens per row.
    batch_size: B, this process's share of the global batch.
    seed: seeds the document order (unless `cfg.shuffle_seed` is set).
    process_index, process_count: this process and how many read the split.
    split: "train", "validation", ...
    rows: the global rows this process feeds, in its batch's order
      (default: rows [process_index * B, (process_index + 1) * B)).

  Returns:
    A `PretrainLoader` (or, for source "synthetic", a `SyntheticLoader`;
    for "speech", a `speech_loader.SpeechLoader` of speech batches).
  """
  cfg = config_lib.as_config(cfg)
  if not 0 <= process_index < process_count:
    raise ValueError(f"process_index {process_index} outside "
                     f"[0, {process_count})")
  config_lib.check_mode(cfg)
  if rows is None:
    rows = range(process_index * batch_size, (process_index + 1) * batch_size)
  if cfg.source == "synthetic":
    from data import synthetic  # pylint: disable=g-import-not-at-top
    return synthetic.SyntheticLoader(
        seq_len=seq_len, batch_size=batch_size, seed=seed,
        process_index=process_index, process_count=process_count,
        vocab_size=cfg.vocab_size, rows=rows)
  if cfg.source == "speech":
    from data import speech_loader  # pylint: disable=g-import-not-at-top
    return speech_loader.SpeechLoader(
        split=split, seq_len=seq_len, batch_size=batch_size, seed=seed,
        process_index=process_index, process_count=process_count, rows=rows,
        folder=cfg.path or None)
  tokenizer = load_tokenizer(cfg)
  ds = _slots(cfg, tokenizer, split, seed, list(rows),
              batch_size * process_count, seq_len)
  return PretrainLoader(ds, tokenizer, rows, seq_len,
                        (process_index, process_count),
                        workers=not isinstance(ds, Slots), mode=cfg.mode)


def _slots(cfg, tokenizer, split, seed, rows, global_rows, seq_len):
  """The `Slots` of `rows`, read by Grain workers where the config asks."""
  source = (None if cfg.source in documents_lib.SHARDED
            else documents_lib.shuffled_source(cfg, split, seed))
  whole = cfg.mode == "stream"  # a stream reads every document to its end
  fields = None
  if cfg.source == "articles":
    from data import articles  # pylint: disable=g-import-not-at-top
    fields = articles.markers(tokenizer.specials())
  annotate = Annotate(tokenizer, None if whole else cfg.max_doc_rows * seq_len,
                      linking.linker(cfg.entities), fields)
  eos = tokenizer.specials()["eos"]
  docs = lambda r: documents_lib.documents(cfg, split, seed, r, global_rows,
                                           source)
  ds = Slots({r: Pack(docs(r)
                      .map(annotate), seq_len, eos) for r in rows}, seq_len)
  finite = documents_lib.epochs_and_seed(cfg, split, seed)[0] is not None
  if not cfg.worker_count or finite:  # a finite split reads in-process
    return ds
  if len(rows) % cfg.worker_count:
    raise ValueError(f"data.worker_count={cfg.worker_count} must divide "
                     f"the {len(rows)} rows each process reads")
  # Grain reads absl flags in its workers; outside an absl app (tests,
  # notebooks) nobody has parsed them, so take the defaults.
  if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()
  return ds.mp_prefetch(grain.MultiprocessingOptions(
      num_workers=cfg.worker_count))


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
