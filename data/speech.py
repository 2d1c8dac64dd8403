"""The speech sample: the sample's sentences spoken by espeak-ng in several
voices, as log-mel frames with the synthesiser's phone alignments.

    python -m data.speech [--dir DIR]

builds, once, under `<data_dir()>/speech`:
  train.npz, validation.npz
      features [N, M] float16: every utterance's log-mel frames
        (`data.audio.log_mel`), one utterance after another;
      offsets [U + 1] int64: utterance u is frames offsets[u]:offsets[u+1];
      phones [N] int16: each frame's phone class (0 silence), from the
        phoneme events espeak-ng reports while it speaks;
      voices [U] int16: the voice (an index of `VOICES`) of each utterance.
  meta.json   the features' settings, the phone inventory, the voices, the
              per-bin mean and standard deviation of the train frames
  BUILT       a stamp naming the build; present = nothing to do

The text is the sample's own prose (`data.sample.collect`, its train and
validation documents apart), cut into sentences of `MIN_WORDS` to
`MAX_WORDS` words. Each sentence is spoken once, by the voices in turn, at
a speaking rate drawn per sentence. The speech engine is espeak-ng 1.52
from the `espeakng-loader` wheel (its shared library and voice data, read
through ctypes; `make data` installs it).
"""

import argparse
import json
import os
import pathlib
import shutil

import numpy as np

from data import annotate
from data import audio
from data import c4
from data import config
from data import espeak

VERSION = "1"
VOICES = ("en-us+m1", "en-us+f2", "en+m3", "en+f4", "en-gb-scotland+m2",
          "en-gb-x-rp+f1", "en-029+m4", "en-us-nyc+f3")
SENTENCES = {"train": 1600, "validation": 240}
MIN_WORDS, MAX_WORDS = 5, 24
RATES = (150, 200)  # words per minute, drawn per sentence
SILENCE = "_"


def default_dir() -> pathlib.Path:
  """`<data_dir()>/speech`."""
  return config.data_dir() / "speech"


def sentences(split: str, count: int, seed: int = 0) -> list[str]:
  """`count` sentences of the sample's `split` documents, spread over them
  (a fixed draw): plain prose of `MIN_WORDS` to `MAX_WORDS` words."""
  from data import sample  # pylint: disable=g-import-not-at-top
  found = []
  for record in sample.collect():
    if sample.split_of(record) != split:
      continue
    for s in annotate.split_sentences(record["text"]):
      words = s.split()
      letters = sum(c.isalpha() for c in s)
      if (MIN_WORDS <= len(words) <= MAX_WORDS and s.isascii()
          and letters >= 0.7 * len(s)):
        found.append(s)
  if len(found) < count:
    raise ValueError(f"the sample's {split} split has {len(found)} usable "
                     f"sentences, fewer than the {count} asked for")
  pick = np.random.default_rng(seed).choice(len(found), count, replace=False)
  return [found[i] for i in sorted(pick)]


def phone_of(mnemonic: str) -> str:
  """A phoneme event's class: stress marks dropped, every pause silence."""
  name = mnemonic.replace("'", "").replace(",", "")
  return SILENCE if not name or name.startswith("_") else name


def frame_phones(events: list[tuple[int, str]], frames: int,
                 f: audio.Features) -> list[str]:
  """Each frame's phone (`phone_of`): the last phoneme event at or before
  the frame's centre sample (t * hop); silence before the first."""
  starts = np.array([s for s, _ in events], np.int64)
  names = [phone_of(n) for _, n in events]
  centres = np.arange(frames) * f.hop_length
  index = np.searchsorted(starts, centres, side="right") - 1
  return [names[i] if i >= 0 else SILENCE for i in index]


def speak_all(texts: list[str], split_seed: int, f: audio.Features):
  """Frames, phone names per frame and voice index of every text."""
  engine = espeak.engine()
  rates = np.random.default_rng(split_seed).integers(*RATES, len(texts))
  out = []
  for i, text in enumerate(texts):
    voice = i % len(VOICES)
    wave, events = engine.speak(text, VOICES[voice], int(rates[i]))
    feats = audio.log_mel(wave, f)
    out.append((feats, frame_phones(events, len(feats), f), voice))
  return out


def _write_split(tmp: pathlib.Path, split: str, spoken, inventory) -> None:
  """One split's arrays (see the module docstring)."""
  index = {p: i for i, p in enumerate(inventory)}
  other = index["other"]
  lengths = [len(x) for x, _, _ in spoken]
  np.savez(tmp / f"{split}.npz",
           features=np.concatenate([x for x, _, _ in spoken]).astype(
               np.float16),
           offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
           phones=np.array([index.get(p, other) for _, ps, _ in spoken
                            for p in ps], np.int16),
           voices=np.array([v for _, _, v in spoken], np.int16))


def inventory_of(spoken) -> list[str]:
  """Phone classes: silence, the train phones by falling count, "other"
  (for a phone the train split never has)."""
  counts = {}
  for _, phones, _ in spoken:
    for p in phones:
      counts[p] = counts.get(p, 0) + 1
  counts.pop(SILENCE, None)
  return [SILENCE] + sorted(counts, key=lambda p: (-counts[p], p)) + [
      "other"]


def build(folder=None, counts: dict | None = None) -> pathlib.Path:
  """Builds the speech sample into `folder` unless it is built (`counts`:
  sentences per split, default `SENTENCES`; a smaller build for tests)."""
  folder = pathlib.Path(folder or default_dir())
  counts = dict(counts or SENTENCES)
  stamp = folder / "BUILT"
  if stamp.exists() and json.loads(stamp.read_text()) == {
      "version": VERSION, "sentences": counts}:
    return folder
  f = audio.Features()
  spoken = {s: speak_all(sentences(s, n), i, f)
            for i, (s, n) in enumerate(counts.items())}
  inventory = inventory_of(spoken["train"])
  tmp = folder.with_name(f"{folder.name}.tmp{os.getpid()}")
  shutil.rmtree(tmp, ignore_errors=True)
  tmp.mkdir(parents=True)
  for split, items in spoken.items():
    _write_split(tmp, split, items, inventory)
  train = np.concatenate([x for x, _, _ in spoken["train"]])
  meta = dict(version=VERSION, features=vars(f), phones=inventory,
              voices=list(VOICES), mean=train.mean(0).tolist(),
              std=np.maximum(train.std(0), 1e-3).tolist(),
              utterances={s: len(v) for s, v in spoken.items()},
              frames={s: int(sum(len(x) for x, _, _ in v))
                      for s, v in spoken.items()})
  (tmp / "meta.json").write_text(json.dumps(meta))
  (tmp / "BUILT").write_text(json.dumps({"version": VERSION,
                                          "sentences": counts}))
  return c4.publish(tmp, folder)


class Split:
  """One split of a built speech sample, read without pickle.

  Attributes:
    features: [N, M] float32 frames, normalised per bin by the train mean
      and standard deviation.
    offsets, phones, voices: as stored (see the module docstring).
    meta: meta.json.
  """

  def __init__(self, split: str, folder=None):
    folder = pathlib.Path(folder or default_dir())
    if not (folder / "BUILT").exists():
      build(folder)
    self.meta = json.loads((folder / "meta.json").read_text())
    with np.load(folder / f"{split}.npz", allow_pickle=False) as z:
      feats = z["features"].astype(np.float32)
      self.offsets, self.phones = z["offsets"], z["phones"]
      self.voices = z["voices"]
    mean = np.asarray(self.meta["mean"], np.float32)
    std = np.asarray(self.meta["std"], np.float32)
    self.features = (feats - mean) / std

  def __len__(self) -> int:
    return len(self.voices)

  def utterance(self, u: int) -> tuple[np.ndarray, np.ndarray]:
    """Frames [T, M] and phone classes [T] of utterance `u`."""
    a, b = self.offsets[u], self.offsets[u + 1]
    return self.features[a:b], self.phones[a:b]


def main(argv=None) -> None:
  """`python -m data.speech`: builds the speech sample."""
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--dir", default=None, help="default: <data_dir>/speech")
  folder = build(parser.parse_args(argv).dir)
  meta = json.loads((folder / "meta.json").read_text())
  print(f"speech sample ready at {folder}: {meta['utterances']} "
        f"utterances, {meta['frames']} frames, {len(meta['phones'])} phone "
        f"classes, {len(meta['voices'])} voices")


if __name__ == "__main__":
  main()
