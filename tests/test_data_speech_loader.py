"""Speech rows: shapes, crops, exact resume, process shares, one pass."""

import numpy as np

from data import batch as batch_lib
from data import speech
from data import speech_loader


def _loader(speech_dir, split="train", **kw):
  args = dict(split=split, seq_len=96, batch_size=4, seed=3,
              folder=speech_dir)
  args.update(kw)
  return speech_loader.SpeechLoader(**args)


def test_rows_are_utterance_crops(speech_dir):
  loader = _loader(speech_dir)
  batch = next(loader)
  assert set(batch) == set(batch_lib.SPEECH_KEYS)
  assert batch["features"].shape == (4, 96, 80)
  assert batch["features"].dtype == np.float32
  split = speech.Split("train", speech_dir)
  for r in range(4):
    u = loader.utterance_of(r)
    frames, phones = split.utterance(u)
    n = int(batch["doc_ids"][r].sum())
    assert n == min(96, len(frames))
    assert (batch["doc_ids"][r, :n] == 1).all()
    # The row is a window of its utterance.
    starts = [s for s in range(len(frames) - n + 1)
              if np.array_equal(frames[s:s + n], batch["features"][r, :n])]
    assert starts
    np.testing.assert_array_equal(batch["phone_ids"][r, :n],
                                  phones[starts[0]:starts[0] + n] + 1)
    assert (batch["voice_ids"][r, :n] == split.voices[u] + 1).all()


def test_an_epoch_reads_every_utterance_once(speech_dir):
  loader = _loader(speech_dir, batch_size=8)
  seen = [loader.utterance_of(g) for g in range(24)]
  assert sorted(seen) == list(range(24))
  assert [loader.utterance_of(g) for g in range(24, 48)] != seen


def test_resume_and_process_shares_are_exact(speech_dir):
  loader = _loader(speech_dir)
  next(loader), next(loader)
  state = loader.get_state()
  expected = [next(loader) for _ in range(3)]
  resumed = _loader(speech_dir)
  resumed.set_state(state)
  for want in expected:
    got = next(resumed)
    for k in want:
      np.testing.assert_array_equal(got[k], want[k])
  whole = next(_loader(speech_dir, batch_size=4))
  parts = [next(_loader(speech_dir, batch_size=2, process_index=i,
                        process_count=2)) for i in range(2)]
  np.testing.assert_array_equal(
      np.concatenate([p["features"] for p in parts]), whole["features"])


def test_validation_is_read_once_from_each_start(speech_dir):
  loader = _loader(speech_dir, split="validation", batch_size=3)
  batches = list(loader)
  assert len(batches) == 3  # 8 utterances in rows of 3
  rows = np.concatenate([b["doc_ids"] for b in batches])
  assert (rows.sum(1) > 0).sum() == 8
  split = speech.Split("validation", speech_dir)
  first = split.utterance(0)[0][:96]
  np.testing.assert_array_equal(batches[0]["features"][0, :len(first)],
                                first)
