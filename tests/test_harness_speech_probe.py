"""The speech views: step vectors, grouped intervals, the probes."""

import numpy as np

from data import speech
from zoo.harness import speech_probe
from zoo.harness import statistics


def test_grouped_replicates_resample_whole_utterances():
  # 20 utterances of 50 steps each, every step of an utterance alike:
  # the accuracy's spread is that of 20 draws, not of 1,000.
  groups = np.repeat(np.arange(20), 50)
  correct = np.repeat(np.arange(20) % 2 == 0, 50)
  reps = speech_probe.grouped_replicates(correct, groups, n_boot=2000)
  iid = statistics.replicates(correct.astype(int), np.ones(1000, int),
                              "accuracy", n_boot=2000)
  assert abs(reps.mean() - 50) < 1.5
  assert reps.std() > 5 * iid.std()
  np.testing.assert_array_equal(
      reps, speech_probe.grouped_replicates(correct, groups, n_boot=2000))


def test_windows_and_the_floor_read_the_stacked_frames():
  frames = np.arange(10 * 2, dtype=np.float32).reshape(10, 2)
  w = speech_probe.windows(frames, 4)
  assert w.shape == (3, 4, 2) and (w[2, 2:] == 0).all()
  steps = speech_probe.encode(None, frames, 6)
  assert steps.shape == (3, 1, 6)  # 10 frames: 3 steps of 3, one left over
  np.testing.assert_array_equal(steps[1, 0], frames[3:6].reshape(-1))


def test_views_of_the_log_mel_floor(speech_dir):
  views = speech_probe.run(None, train_utterances=16, folder=speech_dir)
  assert set(views) == set(speech_probe.VIEWS)
  meta_voices = len(speech.VOICES)
  assert views["voice"]["classes"] == meta_voices
  for v in views.values():
    iv = v["interval"]
    assert 0 <= iv.low <= iv.mean <= iv.high <= 100
    assert len(v["accuracy"][1]) == statistics.N_BOOT
  # The input itself names the voice far above chance (1 in 8), and the
  # phone above the share of silence alone.
  assert views["voice"]["interval"].mean > 40
  valid = speech.Split("validation", speech_dir)
  silence = 100 * (valid.phones == 0).mean()
  assert views["phone"]["interval"].mean > silence + 5
