"""A synthetic pretraining stream with the batch contract, for tests.

Rows are random "documents" of random "sentences" of random "words", so
every id array is meaningful. Row r of the global batch of step s is a
function of (seed, s * G + r) alone, G the global batch: the state is just
the next step, the same on every process, so resume is exact on any number
of processes.
"""

import numpy as np

from data import batch as batch_lib


class StepState:
  """The state of a loader whose rows are a function of the step alone:
  the next step, the same on every process."""
  step: int = 0

  def get_state(self) -> dict:
    """JSON state: the next step to produce."""
    return {"step": self.step}

  def set_state(self, state: dict) -> None:
    """Resumes exactly where `get_state` was taken."""
    self.step = int(state["step"])

  def restore(self, states: list[dict]) -> None:
    """Resumes from every process's state (all hold the same step)."""
    self.set_state(states[0])


class SyntheticLoader(StepState):
  """Iterator of `[batch_size, seq_len]` int32 dicts (per-process share).

  Attributes:
    vocab_size: ids are drawn from [first_id, vocab_size - 100).
  """

  def __init__(self, *, seq_len: int, batch_size: int, seed: int = 0,
               process_index: int = 0, process_count: int = 1,
               vocab_size: int = 512, first_id: int = 7, rows=None):
    self.seq_len, self.batch_size = seq_len, batch_size
    self.global_rows = batch_size * process_count
    self.rows = list(rows) if rows is not None else list(range(
        process_index * batch_size, (process_index + 1) * batch_size))
    self.seed, self.vocab_size, self.first_id = seed, vocab_size, first_id
    self.process_index, self.process_count = process_index, process_count
    self.step = 0

  def __iter__(self):
    return self

  def __next__(self) -> dict[str, np.ndarray]:
    rows = [self._row(self.step * self.global_rows + r) for r in self.rows]
    self.step += 1
    return {k: np.stack([r[k] for r in rows]) for k in batch_lib.KEYS}

  def _row(self, index: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng([self.seed, index])
    length = self.seq_len - int(rng.integers(0, self.seq_len // 4 + 1))
    out = {k: np.zeros(self.seq_len, np.int32) for k in batch_lib.KEYS}
    hi = max(self.first_id + 1, self.vocab_size - 100)
    out["tokens"][:length] = rng.integers(self.first_id, hi, length)
    # Boundaries: a new word with p=0.7, sentence 0.1, document 0.02.
    word = np.cumsum(rng.random(length) < 0.7)
    sent = np.cumsum(rng.random(length) < 0.1)
    doc = np.cumsum(rng.random(length) < 0.02)
    out["word_ids"][:length] = word - word[0] + 1
    out["sentence_ids"][:length] = sent - sent[0] + 1
    out["doc_ids"][:length] = doc - doc[0] + 1
    # Each row's documents are its own: keys from (seed, row, document).
    keys = [batch_lib.doc_key(f"{self.seed}/{index}/{d}") for d in
            out["doc_ids"][:length]]
    out["doc_keys"][:length] = keys
    ends = np.flatnonzero(np.diff(out["doc_ids"][:length]) != 0)
    out["tokens"][ends] = 1  # EOS closes each document
    out["tokens"][length - 1] = 1
    phrase = (out["word_ids"][:length] % 5 == 0) * out["word_ids"][:length]
    out["phrase_ids"][:length] = phrase
    return out
