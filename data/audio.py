"""Log-mel features: the speech pipeline's one definition of a frame.

`log_mel(wave, features)` turns a waveform [S] into frames [T, M]: a
centred short-time Fourier transform (Hann window, zero padding at the
ends), its power spectrum through a Slaney-style mel filter bank
(`mel_filters`, area-normalised triangles on the Slaney mel scale), then
the natural log with a floor. With `Features()` a frame is 25 ms of audio
every 10 ms at the synthesiser's 22,050 Hz, in 80 mel bins, as the masked
acoustic model (Mockingjay) reads speech.

Letters: S samples, T frames, K frequency bins (n_fft / 2 + 1), M mel bins.
"""

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Features:
  """How waveforms become frames."""
  sample_rate: int = 22050  # Hz: espeak-ng's output rate
  n_fft: int = 1024  # FFT size (K = n_fft // 2 + 1 bins)
  win_length: int = 551  # Hann window: 25 ms
  hop_length: int = 220  # frame step: 10 ms
  n_mels: int = 80  # M
  fmin: float = 0.0  # Hz, lowest mel edge
  fmax: float | None = None  # Hz, highest mel edge (None: sample_rate / 2)
  floor: float = 1e-6  # added to the mel power before the log

  def __post_init__(self):
    if not 0 < self.win_length <= self.n_fft:
      raise ValueError(f"win_length {self.win_length} must be in "
                       f"(0, n_fft={self.n_fft}]")
    if self.hop_length <= 0 or self.n_mels <= 0:
      raise ValueError("hop_length and n_mels must be positive")

  @property
  def frame_seconds(self) -> float:
    """Seconds between two frames."""
    return self.hop_length / self.sample_rate


def hz_to_mel(hz):
  """The Slaney mel scale: linear below 1 kHz (3 mels per 200 Hz), then
  logarithmic (27 mels per factor 6.4)."""
  hz = np.asarray(hz, np.float64)
  step, knee, log_step = 200.0 / 3, 1000.0, np.log(6.4) / 27.0
  linear = hz / step
  return np.where(hz >= knee, knee / step + np.log(np.maximum(hz, knee)
                                                   / knee) / log_step, linear)


def mel_to_hz(mel):
  """The inverse of `hz_to_mel`."""
  mel = np.asarray(mel, np.float64)
  step, knee, log_step = 200.0 / 3, 1000.0, np.log(6.4) / 27.0
  top = knee / step
  return np.where(mel >= top, knee * np.exp(log_step * (mel - top)),
                  step * mel)


def mel_filters(f: Features) -> np.ndarray:
  """[M, K] triangular filters, each of unit area (Slaney normalisation)."""
  fmax = f.fmax if f.fmax is not None else f.sample_rate / 2
  edges = mel_to_hz(np.linspace(hz_to_mel(f.fmin), hz_to_mel(fmax),
                                f.n_mels + 2))
  freqs = np.linspace(0, f.sample_rate / 2, f.n_fft // 2 + 1)
  width = np.diff(edges)  # [M + 1]
  ramps = edges[:, None] - freqs[None, :]  # [M + 2, K]
  lower = -ramps[:-2] / width[:-1, None]
  upper = ramps[2:] / width[1:, None]
  weights = np.maximum(0.0, np.minimum(lower, upper))
  weights *= (2.0 / (edges[2:] - edges[:-2]))[:, None]
  return weights.astype(np.float32)


def frame_count(samples: int, f: Features) -> int:
  """T: frames of a waveform of `samples` samples (centred frames)."""
  return 1 + samples // f.hop_length


def power_spectrum(wave: np.ndarray, f: Features) -> np.ndarray:
  """[S] -> [T, K] power of the centred STFT (Hann window of
  `win_length`, centred in `n_fft`; the wave zero-padded by n_fft / 2)."""
  x = np.asarray(wave, np.float32)
  if np.issubdtype(np.asarray(wave).dtype, np.integer):
    x = x / 32768.0
  pad = f.n_fft // 2
  x = np.pad(x, (pad, pad))
  n = 1 + (len(x) - f.n_fft) // f.hop_length
  frames = np.lib.stride_tricks.as_strided(
      x, (n, f.n_fft), (x.strides[0] * f.hop_length, x.strides[0]),
      writeable=False)
  n_win = np.arange(f.win_length)
  window = 0.5 - 0.5 * np.cos(2 * np.pi * n_win / f.win_length)  # periodic
  left = (f.n_fft - f.win_length) // 2
  full = np.zeros(f.n_fft, np.float32)
  full[left:left + f.win_length] = window
  spectrum = np.fft.rfft(frames * full, axis=-1)
  return (spectrum.real ** 2 + spectrum.imag ** 2).astype(np.float32)


def log_mel(wave: np.ndarray, f: Features = Features()) -> np.ndarray:
  """[S] waveform (int16 or float in [-1, 1]) -> [T, M] float32 log-mel."""
  if np.asarray(wave).ndim != 1:
    raise ValueError(f"log_mel takes one waveform [S], got shape "
                     f"{np.shape(wave)}")
  mel = power_spectrum(wave, f) @ mel_filters(f).T
  return np.log(mel + f.floor).astype(np.float32)
