"""C4 as users hold it: json.gz shards, one JSON record a line.

Shards follow the public release layout, `c4-<split>.NNNNN-of-NNNNN.json.gz`
with records `{"text", "url", "timestamp"}`, on any path etils.epath opens.
`JsonShards` is a Grain `IterDataset` over them: shards are split between
shares (or, with fewer shards than shares, each shard's lines are), the shard order
is shuffled per epoch, and lines are shuffled within blocks of
`shuffle_buffer`. Its state is (epoch, shard position, line), so resuming
re-reads at most one shard prefix and no document is repeated or skipped.

Bad input never stops the stream: each problem is counted on the element
that carries the next document (`bad`, reason -> count).
"""

import glob as globlib
import gzip
import json
import os
import pathlib
import shutil
import zlib
from typing import Callable, Iterator

import grain
import numpy as np
from etils import epath


def shard_name(split: str, index: int, count: int) -> str:
  """`c4-<split>.NNNNN-of-NNNNN.json.gz`, the release's naming."""
  return f"c4-{split}.{index:05d}-of-{count:05d}.json.gz"


def write_shards(records: list[dict], folder, split: str,
                 num_shards: int) -> list[str]:
  """Writes `records` round-robin into `num_shards` shards (same bytes
  on every run)."""
  folder = epath.Path(folder)
  folder.mkdir(parents=True, exist_ok=True)
  paths = []
  for i in range(num_shards):
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n"
                    for r in records[i::num_shards])
    path = folder / shard_name(split, i, num_shards)
    # mtime=0: identical bytes on every build.
    path.write_bytes(gzip.compress(lines.encode("utf-8"), mtime=0))
    paths.append(str(path))
  return paths


def build_once(folder, version: str, splits: Callable[[], dict],
               what: str) -> pathlib.Path:
  """A folder of C4 shards built from `splits()` unless its stamp says it
  is built (`<folder>/BUILT`, JSON with `version` and the counts of each
  split under `what`). The shards are written into a private temporary
  folder renamed into place: two processes that build at once never see
  each other's halves.

  Args:
    folder: where the shards go (`<folder>/c4/`).
    version: the build's version; another version is rebuilt.
    splits: returns {split: C4-schema records}; called only to build.
    what: the stamp's name for the records ("pairs", "articles").
  """
  folder = pathlib.Path(folder)
  stamp = folder / "BUILT"
  if stamp.exists() and json.loads(stamp.read_text()).get(
      "version") == version:
    return folder
  tmp = folder.with_name(f"{folder.name}.tmp{os.getpid()}")
  shutil.rmtree(tmp, ignore_errors=True)
  records = splits()
  for split, recs in records.items():
    write_shards(recs, tmp / "c4", split, 2 if split == "train" else 1)
  (tmp / "BUILT").write_text(json.dumps(
      {"version": version, what: {s: len(r) for s, r in records.items()}}))
  return publish(tmp, folder)


def publish(tmp: pathlib.Path, folder: pathlib.Path) -> pathlib.Path:
  """Renames a finished build `tmp` into `folder` (replacing an older
  build there); if another process got there first, its build (the
  same) stays and `tmp` goes."""
  shutil.rmtree(folder, ignore_errors=True)
  try:
    tmp.rename(folder)
  except OSError:
    shutil.rmtree(tmp)
  return folder


def find_shards(path: str, split: str) -> list[str]:
  """Sorted shard paths of `split`: in folder `path`, or a glob with {split}."""
  if not path:
    raise ValueError("data.source='c4' needs data.path: a folder of "
                     "c4-<split>.*.json.gz shards or a glob with {split}")
  pattern = path.format(split=split) if "{split}" in path else None
  if pattern is None:
    root = epath.Path(path)
    found = sorted(str(p) for p in root.glob(f"c4-{split}.*json.gz"))
  elif "://" in pattern:
    root = epath.Path(pattern.rsplit("/", 1)[0])
    found = sorted(str(p) for p in root.glob(pattern.rsplit("/", 1)[1]))
  else:
    found = sorted(globlib.glob(pattern))
  if not found:
    raise FileNotFoundError(f"no C4 shards for split {split!r} at {path!r}")
  return found


def _read_lines(path: str, bad: dict) -> Iterator[bytes]:
  """Lines of one shard; a missing or truncated shard is counted, not raised."""
  try:
    f = epath.Path(path).open("rb")
  except (FileNotFoundError, OSError):
    bad["missing_shard"] = bad.get("missing_shard", 0) + 1
    return
  with f, gzip.GzipFile(fileobj=f) as gz:
    try:
      yield from gz
    except (EOFError, gzip.BadGzipFile, zlib.error, OSError):
      bad["truncated_shard"] = bad.get("truncated_shard", 0) + 1


def parse_line(line: bytes, text_key: str = "text") -> tuple[str | None, dict]:
  """`(text, bad)` of one JSON line; `text` is None if the line is unusable."""
  bad = {}
  try:
    text = line.decode("utf-8")
  except UnicodeDecodeError:
    bad["undecodable"] = 1
    text = line.decode("utf-8", errors="replace")
  try:
    value = json.loads(text)[text_key] if text.strip() else None
  except (ValueError, KeyError, TypeError):
    value = None
  if not isinstance(value, str):
    bad["bad_record"] = 1
    value = None
  return value, bad


def _share(paths: list[str], index: int, count: int):
  """`(paths, (first line, line step))` of share `index` of `count`.

  With at least as many shards as shares, share i reads shards i::count
  whole. With fewer, share i reads the one shard i % S, which it splits by
  line with the other shares of that shard.
  """
  if len(paths) >= count:
    return paths[index::count], (0, 1)
  shard = index % len(paths)
  sharers = len(range(shard, count, len(paths)))
  return [paths[shard]], (index // len(paths), sharers)


class JsonShards(grain.IterDataset):
  """Documents `{"text": str | None, "bad": {reason: count}}` of C4 shards."""

  def __init__(self, paths: list[str], *, seed: int, num_epochs: int | None,
               block: int = 1024, share: int = 0, num_shares: int = 1,
               text_key: str = "text"):
    super().__init__()
    self.seed, self.num_epochs, self.block = seed, num_epochs, block
    self.text_key = text_key
    self.paths, self.line_slice = _share(paths, share, num_shares)

  def set_slice(self, sl: slice, sequential_slice: bool = False) -> None:
    """Keeps every `sl.step`-th line (Grain worker sharding)."""
    del sequential_slice
    start, step = self.line_slice
    self.line_slice = (start + step * (sl.start or 0), step * (sl.step or 1))

  def __iter__(self) -> "JsonShardsIterator":
    return JsonShardsIterator(self)


class JsonShardsIterator(grain.DatasetIterator):
  """Iterator of `JsonShards`; state: epoch, shard position, lines taken."""

  def __init__(self, ds: JsonShards):
    super().__init__()
    self.ds = ds
    self.set_state({"epoch": 0, "shard": 0, "line": 0})

  def _order(self) -> list[int]:
    rng = np.random.default_rng([self.ds.seed, self.epoch])
    return [int(i) for i in rng.permutation(len(self.ds.paths))]

  def _lines(self, skip: int) -> Iterator[tuple[bytes | None, dict]]:
    """Items of the current shard in block-shuffled order, after `skip`.

    A shard's problems come as a last item `(None, bad)`, which counts as a
    position too, so a resumed iterator does not count them twice.
    """
    bad = {}
    path = self.ds.paths[self._order()[self.shard]]
    start, step = self.ds.line_slice
    lines = (l for i, l in enumerate(_read_lines(path, bad))
             if i % step == start)
    pos, b = 0, 0
    while block := [l for _, l in zip(range(self.ds.block), lines)]:
      rng = np.random.default_rng([self.ds.seed, self.epoch, self.shard, b])
      for i in rng.permutation(len(block)):
        if pos >= skip:
          yield block[i], {}
        pos += 1
      b += 1
    if bad and pos >= skip and start == 0:  # one sharer reports the shard
      yield None, bad

  def __next__(self) -> dict:
    while self.ds.num_epochs is None or self.epoch < self.ds.num_epochs:
      if not self.ds.paths:
        raise StopIteration
      for line, bad in self._gen:
        self.line += 1
        if line is None:
          return {"text": None, "bad": bad}
        text, line_bad = parse_line(line, self.ds.text_key)
        return {"text": text, "bad": line_bad}
      self.shard, self.line = self.shard + 1, 0
      if self.shard == len(self.ds.paths):
        self.epoch, self.shard = self.epoch + 1, 0
      self._gen = self._lines(0)
    raise StopIteration

  def get_state(self) -> dict:
    """JSON state: `{"epoch", "shard", "line"}`."""
    return {"epoch": self.epoch, "shard": self.shard, "line": self.line}

  def set_state(self, state: dict) -> None:
    """Resumes at `state` (re-reads the current shard up to `line`)."""
    self.epoch, self.shard = int(state["epoch"]), int(state["shard"])
    self.line = int(state["line"])
    self._gen = self._lines(self.line)
