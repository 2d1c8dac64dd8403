"""The speech sample: espeak-ng through ctypes, phone alignments, the build."""

import json

import numpy as np
import pytest

from data import audio
from data import espeak
from data import speech


def test_the_engine_speaks_with_phoneme_events():
  engine = espeak.engine()
  wave, events = engine.speak("The quick brown fox.", "en-us+f2", 175)
  assert wave.dtype == np.int16 and engine.sample_rate == 22050
  assert 0.5 < len(wave) / engine.sample_rate < 3.0
  assert np.abs(wave).max() > 1000
  starts = [s for s, _ in events]
  assert starts == sorted(starts) and max(starts) <= len(wave)
  names = [speech.phone_of(n) for _, n in events]
  assert {"k", "w", "b", "r", "f", "s"} <= set(names)
  slow, _ = engine.speak("The quick brown fox.", "en-us+f2", 120)
  assert len(slow) > 1.2 * len(wave)
  other, _ = engine.speak("The quick brown fox.", "en+m3", 175)
  assert len(other) != len(wave) or np.abs(other - wave).max() > 0
  with pytest.raises(ValueError, match="no voice 'xx-none'"):
    engine.speak("hello", "xx-none")


def test_phone_classes_drop_stress_and_merge_pauses():
  assert speech.phone_of("'aI") == "aI" and speech.phone_of(",oU") == "oU"
  assert speech.phone_of("_:") == speech.phone_of("_") == speech.SILENCE
  assert speech.phone_of("t#") == "t#"


def test_each_frame_takes_the_phone_started_at_or_before_its_centre():
  f = audio.Features(hop_length=100)
  events = [(150, "'a"), (300, "b"), (420, "_:")]
  # Frame centres 0, 100, ..., 600.
  assert speech.frame_phones(events, 7, f) == [
      "_", "_", "a", "b", "b", "_", "_"]


def test_the_built_sample(speech_dir):
  meta = json.loads((speech_dir / "meta.json").read_text())
  assert meta["utterances"] == {"train": 24, "validation": 8}
  assert meta["phones"][0] == speech.SILENCE and meta["phones"][-1] == "other"
  assert meta["voices"] == list(speech.VOICES)
  train = speech.Split("train", speech_dir)
  assert len(train) == 24 and train.offsets[-1] == len(train.features)
  np.testing.assert_array_equal(train.voices, np.arange(24) % 8)
  assert train.features.shape[1] == audio.Features().n_mels
  assert 0 <= train.phones.min() and train.phones.max() < len(meta["phones"])
  # Normalised by the train frames' own moments.
  np.testing.assert_allclose(train.features.mean(0), 0, atol=0.02)
  np.testing.assert_allclose(train.features.std(0), 1, atol=0.02)
  frames, phones = train.utterance(3)
  assert len(frames) == len(phones) > 50
  assert (phones == 0).any() and (phones > 0).mean() > 0.5
  valid = speech.Split("validation", speech_dir)
  assert len(valid) == 8
  texts = set(speech.sentences("train", 24)) & set(
      speech.sentences("validation", 8))
  assert not texts  # no sentence is in both splits


def test_a_built_sample_is_kept_and_other_counts_rebuild(speech_dir,
                                                         tmp_path):
  stamp = (speech_dir / "BUILT").read_text()
  assert speech.build(speech_dir, {"train": 24, "validation": 8}) == (
      speech_dir)
  assert (speech_dir / "BUILT").read_text() == stamp
  other = speech.build(tmp_path / "s", {"train": 8, "validation": 8})
  assert json.loads((other / "meta.json").read_text())["utterances"][
      "train"] == 8
