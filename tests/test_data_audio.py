"""Log-mel frames against librosa, the reference implementation."""

import librosa
import numpy as np
import pytest

from data import audio


def _wave(samples=30001, seed=0):
  rng = np.random.default_rng(seed)
  t = np.arange(samples)
  tone = 8000 * np.sin(t * 0.05) + 3000 * np.sin(t * 0.31)
  return (tone + rng.standard_normal(samples) * 500).astype(np.int16)


def test_mel_filters_match_librosa():
  f = audio.Features()
  ref = librosa.filters.mel(sr=f.sample_rate, n_fft=f.n_fft,
                            n_mels=f.n_mels, fmin=f.fmin, fmax=f.fmax)
  np.testing.assert_allclose(audio.mel_filters(f), ref, atol=1e-7)


@pytest.mark.parametrize("settings", [
    {}, dict(n_mels=40, fmin=60.0, fmax=7600.0, n_fft=512, win_length=400,
             hop_length=160, sample_rate=16000)])
def test_log_mel_matches_librosa(settings):
  f = audio.Features(**settings)
  wave = _wave(20011)
  ours = audio.log_mel(wave, f)
  mel = librosa.feature.melspectrogram(
      y=wave.astype(np.float32) / 32768, sr=f.sample_rate, n_fft=f.n_fft,
      hop_length=f.hop_length, win_length=f.win_length, window="hann",
      center=True, pad_mode="constant", power=2.0, n_mels=f.n_mels,
      fmin=f.fmin, fmax=f.fmax)
  assert ours.shape == (audio.frame_count(len(wave), f), f.n_mels)
  np.testing.assert_allclose(ours, np.log(mel + f.floor).T, atol=1e-4)


def test_mel_scale_round_trips_and_is_linear_below_1khz():
  hz = np.array([0.0, 200.0, 999.0, 1000.0, 4000.0, 11025.0])
  np.testing.assert_allclose(audio.mel_to_hz(audio.hz_to_mel(hz)), hz,
                             rtol=1e-9, atol=1e-9)
  np.testing.assert_allclose(audio.hz_to_mel([200.0, 400.0]), [3.0, 6.0])


def test_bad_input_is_named():
  with pytest.raises(ValueError, match="one waveform"):
    audio.log_mel(np.zeros((2, 100)))
  with pytest.raises(ValueError, match="win_length"):
    audio.Features(win_length=2048, n_fft=1024)
