"""How often each piece occurs in a corpus's training split.

    counts = data.counts.piece_counts(cfg, tokenizer)   # int64 [V]

word2vec's subsampling of frequent units and its negative-sampling noise
distribution (unigram counts to the power 0.75) read these counts; a
scheme gets them once, when it is built, as constants of its jitted step.
They are counted over the documents of the `train` split, one pass, at
most `max_docs` of them (the whole embedded sample; the first documents of
a large C4 split), and cached under the data dir, keyed by the corpus, the
tokenizer and `max_docs`.
"""

import hashlib
import itertools
import os

import numpy as np

from data import config as config_lib
from data import documents as documents_lib

MAX_DOCS = 200_000


def _key(cfg, tokenizer, max_docs: int) -> str:
  """A short hash of what the counts depend on."""
  pieces = "\n".join(tokenizer.pieces())
  parts = [cfg.source, cfg.path, cfg.tfds_name, cfg.data_dir, cfg.text_key,
           cfg.sample_dir, pieces, str(max_docs)]
  return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def count(texts, tokenizer, vocab_size: int, chunk: int = 512) -> np.ndarray:
  """Piece counts of `texts` (an iterable of str) under `tokenizer`.

  Returns:
    int64 [vocab_size].
  """
  counts = np.zeros(vocab_size, np.int64)
  it = iter(texts)
  while batch := list(itertools.islice(it, chunk)):
    for ids in tokenizer.encode_batch(batch):
      counts += np.bincount(np.asarray(ids, np.int64),
                            minlength=vocab_size)[:vocab_size]
  return counts


def _train_texts(cfg, max_docs: int):
  """The texts of the first `max_docs` training documents, one pass."""
  once = config_lib.as_config(cfg).copy_and_resolve_references()
  once.num_epochs = 1
  docs = documents_lib.documents(once, "train", seed=0)
  for doc in itertools.islice(iter(docs), max_docs):
    if doc["text"]:
      yield doc["text"]


def piece_counts(cfg, tokenizer, max_docs: int = MAX_DOCS) -> np.ndarray:
  """Counts of every piece over the training split, cached.

  Args:
    cfg: the `data` block of a training config.
    tokenizer: the run's tokenizer (`pieces()`, `encode_batch`).
    max_docs: documents read at most.

  Returns:
    int64 [V], V = len(tokenizer.pieces()).
  """
  cfg = config_lib.as_config(cfg)
  if cfg.source == "synthetic":
    raise ValueError("piece counts need a text corpus; data.source is "
                     "'synthetic'")
  folder = config_lib.data_dir() / "counts"
  path = folder / f"pieces-{_key(cfg, tokenizer, max_docs)}.npy"
  if path.exists():
    return np.load(path, allow_pickle=False)
  counts = count(_train_texts(cfg, max_docs), tokenizer,
                 len(tokenizer.pieces()))
  folder.mkdir(parents=True, exist_ok=True)
  tmp = path.with_name(f"{path.stem}.tmp{os.getpid()}.npy")
  np.save(tmp, counts, allow_pickle=False)
  os.replace(tmp, path)
  return counts
