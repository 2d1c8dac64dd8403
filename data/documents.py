"""Where a split's documents come from: `{"text", "bad"}` elements.

C4 json.gz shards (`c4`, and the samples the zoo builds the same way:
`parallel`, `articles`), or a random-access TFDS array_record source (the
embedded `sample`, or `tfds`), shuffled per epoch. `data.loader` turns
them into rows; `data.counts` counts their pieces.
"""

import importlib

import grain
import numpy as np

from data import c4
from data import config as config_lib

# Sources read as C4 json.gz shards (the others are random-access).
SHARDED = ("c4", "parallel", "articles")
# The sharded sources the zoo builds itself: source -> its module.
_BUILT = {"parallel": "data.parallel", "articles": "data.articles"}
# Reasons a document (or part of one) was not used as is; every one counted.
REASONS = ("undecodable", "bad_record", "missing_shard", "truncated_shard",
           "empty", "control_chars", "long_doc_truncated")


def bad_vector(bad: dict) -> np.ndarray:
  """`bad` ({reason: count}) as int32 [len(REASONS)]."""
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


def documents(cfg, split: str, seed: int, share: int = 0,
              num_shares: int = 1, source=None) -> grain.IterDataset:
  """Share `share` of `num_shares` of `split`: `{"text", "bad"}` elements.

  The shares are disjoint and together cover the split. A random-access
  source (TFDS, the sample; `source`, when given, is its `MapDataset`) is
  shuffled per epoch, then share i takes documents i, i + n, ... of that
  order; C4 json.gz shards are split by shard (or by line when there are
  fewer shards than shares). Nothing depends on how many processes read.
  """
  cfg = config_lib.as_config(cfg)
  if not 0 <= share < num_shares:
    raise ValueError(f"share {share} outside [0, {num_shares})")
  if cfg.source in SHARDED:
    epochs, seed = epochs_and_seed(cfg, split, seed)
    path = cfg.path
    if cfg.source in _BUILT:  # built on first use; `path` moves its folder
      built = importlib.import_module(_BUILT[cfg.source])
      path = str(built.build(cfg.path or None) / "c4")
    return c4.JsonShards(
        c4.find_shards(path, split), seed=seed, num_epochs=epochs,
        block=cfg.shuffle_buffer, share=share, num_shares=num_shares,
        text_key=cfg.text_key)
  if source is None:
    source = shuffled_source(cfg, split, seed)
  return source[share::num_shares].map(Decode(cfg.text_key)
                                       ).to_iter_dataset()


def shuffled_source(cfg, split: str, seed: int) -> grain.MapDataset:
  """A random-access split, reshuffled every epoch (`num_epochs` of them)."""
  cfg = config_lib.as_config(cfg)
  epochs, seed = epochs_and_seed(cfg, split, seed)
  ds = grain.MapDataset.source(_random_access_source(cfg, split))
  if not len(ds):
    raise ValueError(f"split {split!r} has no documents")
  return ds.shuffle(seed=seed % 2**32).repeat(epochs)


def epochs_and_seed(cfg, split: str, seed: int):
  """Passes over `split` (None: endless, the train default) and the
  shuffle seed (`cfg.shuffle_seed` overrides the run's)."""
  epochs = cfg.num_epochs or (None if split == "train" else 1)
  return epochs, seed if cfg.shuffle_seed is None else cfg.shuffle_seed


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
                     "c4, parallel, articles, tfds, synthetic")
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
