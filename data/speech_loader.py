"""Rows of the speech sample: one utterance per row, `SPEECH_KEYS` batches.

Row r of the global batch of step s reads utterance g = s * G + r of the
stream (G the global batch). Training streams every epoch in a fresh
order (a permutation drawn from (seed, epoch)) and cuts an utterance
longer than the row at an offset drawn from (seed, g); the validation
split is read once, in order, from each utterance's start. The state is
the next step alone, so resume is exact on any number of processes, as
with the synthetic source.
"""

import numpy as np

from data import batch as batch_lib
from data import speech
from data import synthetic


class SpeechLoader(synthetic.StepState):
  """Iterator of this process's `[batch_size, seq_len(, M)]` speech rows.

  Attributes:
    split: the sample's split (`speech.Split`).
    n_mels: M, the frames' width.
  """

  def __init__(self, *, split: str, seq_len: int, batch_size: int,
               seed: int = 0, process_index: int = 0, process_count: int = 1,
               rows=None, folder=None):
    self.name, self.seq_len, self.seed = split, seq_len, seed
    self.split = speech.Split(split, folder)
    self.n_mels = self.split.features.shape[1]
    self.global_rows = batch_size * process_count
    self.rows = list(rows) if rows is not None else list(range(
        process_index * batch_size, (process_index + 1) * batch_size))
    self.train = split == "train"
    self.step = 0

  def __iter__(self):
    return self

  def __next__(self) -> dict[str, np.ndarray]:
    start = self.step * self.global_rows
    if not self.train and start + min(self.rows) >= len(self.split):
      raise StopIteration
    self.step += 1
    out = [self._row(start + r) for r in self.rows]
    return {k: np.stack([o[k] for o in out]) for k in batch_lib.SPEECH_KEYS}

  def utterance_of(self, g: int) -> int | None:
    """The utterance row `g` of the stream reads (None: past a finite
    split's end)."""
    n = len(self.split)
    if not self.train:
      return g if g < n else None
    order = np.random.default_rng([self.seed, g // n]).permutation(n)
    return int(order[g % n])

  def _row(self, g: int) -> dict[str, np.ndarray]:
    out = batch_lib.speech_example(self.seq_len, 1, self.n_mels)
    out = {k: np.zeros_like(v[0]) for k, v in out.items()}
    u = self.utterance_of(g)
    if u is None:
      return out
    frames, phones = self.split.utterance(u)
    start = 0
    if self.train and len(frames) > self.seq_len:
      start = int(np.random.default_rng([self.seed, g, 1]).integers(
          0, len(frames) - self.seq_len + 1))
    frames = frames[start:start + self.seq_len]
    n = len(frames)
    out["features"][:n] = frames
    out["doc_ids"][:n] = 1
    out["phone_ids"][:n] = phones[start:start + n] + 1
    out["voice_ids"][:n] = self.split.voices[u] + 1
    return out
