"""The speech views: frozen linear probes of an acoustic encoder.

    views = run(zoo.load(workdir))          # a Mockingjay workdir
    views = run(None)                       # the log-mel floor

Two probes on the speech sample (`data.speech`), each the harness's L2
logistic regression (`zoo.harness.probe`) on frozen states, read as the
text probe reads them: a scalar mix of every layer (`layers="mix"`, the
input projection first), or the last layer alone (`layers="last"`):

- phone: each step's phone class (the synthesiser's alignment at the
  step's middle frame) from the step's vector; fitted on every step of
  `train_utterances` training utterances, scored on every validation step;
- voice: the voice speaking (of `data.speech.VOICES`) from one step's
  vector, fitted and scored on the same steps (from a whole utterance's
  mean every representation, the input included, names the voice almost
  always: too easy to tell representations apart).

`run(None)` reads the input itself: the R stacked log-mel frames of each
step, the floor a learnt representation should clear. Utterances are read
in windows of `window` frames (the pre-training rows' length), each
encoded on its own. Accuracy comes with a 95% bootstrap interval over the
validation utterances: the steps of one utterance are resampled together
(`grouped_replicates`), never as independent examples.

Letters: U utterances, N steps, D width, R frames per step, M mel bins.
"""

import functools

import numpy as np

from data import speech
from zoo.harness import probe as probe_lib
from zoo.harness import statistics
from zoo.models import mockingjay

VIEWS = ("phone", "voice")


def windows(frames: np.ndarray, window: int) -> np.ndarray:
  """[T, M] -> [ceil(T / window), window, M], the last window zero-padded."""
  n = -(-len(frames) // window)
  out = np.zeros((n * window,) + frames.shape[1:], np.float32)
  out[:len(frames)] = frames
  return out.reshape(n, window, -1)


def encode(loaded, frames: np.ndarray, window: int) -> np.ndarray:
  """One utterance's step vectors [N, L+1, D] (N = T // R): every layer of
  the encoder, or (`loaded` None) the stacked input frames [N, 1, R * M]."""
  r = loaded.config.downsample if loaded else speech_downsample()
  n = len(frames) // r
  chunks = windows(frames[:n * r], window)
  ids = np.zeros(chunks.shape[:2], np.int32)
  ids.reshape(-1)[:n * r] = 1
  if loaded is None:
    steps, _ = mockingjay.stack_frames(chunks, ids, r)
    return np.asarray(steps).reshape(-1, 1, steps.shape[-1])[:n]
  out = np.asarray(_apply(loaded)(loaded.params, chunks, ids))
  return out.reshape((-1,) + out.shape[2:])[:n]


def speech_downsample() -> int:
  """R of the floor: Mockingjay's default stacking."""
  return mockingjay.Config().downsample


def _apply(loaded):
  """The jitted every-layer forward of `loaded`'s architecture."""
  return _forward(loaded.config)


@functools.cache
def _forward(config):
  """[B, T, L+1, D] of every layer, jitted once per (frozen) config."""
  import jax  # pylint: disable=import-outside-toplevel
  model = mockingjay.Model(config)
  def layers(p, x, ids):
    out = model.apply({"params": p}, x, doc_ids=ids, return_logits=False)
    return jax.numpy.stack(out["layers"], axis=2)
  return jax.jit(layers)


def step_table(loaded, split: speech.Split, utterances, window: int):
  """Step vectors [N, L+1, D] and their labels: {"phone": [N], "voice":
  [N]} int32, and the utterance of each step [N]."""
  r = loaded.config.downsample if loaded else speech_downsample()
  vecs, phones, owner = [], [], []
  for u in utterances:
    frames, ph = split.utterance(u)
    v = encode(loaded, frames, window)
    vecs.append(v)
    phones.append(ph[np.arange(len(v)) * r + r // 2])
    owner.append(np.full(len(v), u))
  owner = np.concatenate(owner)
  labels = {"phone": np.concatenate(phones).astype(np.int32),
            "voice": split.voices[owner].astype(np.int32)}
  return np.concatenate(vecs), labels, owner


def grouped_replicates(correct: np.ndarray, groups: np.ndarray,
                       n_boot: int = statistics.N_BOOT, seed: int = 0
                       ) -> np.ndarray:
  """Bootstrap replicates [B] of the accuracy (percent) of `correct` [N]
  bool, resampling whole groups [N] (utterances), not single examples.
  Equal `seed` and groups give equal resamples, so two rows pair."""
  keys, index = np.unique(groups, return_inverse=True)
  hits = np.bincount(index, correct.astype(np.float64), len(keys))
  sizes = np.bincount(index, minlength=len(keys)).astype(np.float64)
  rows = np.random.default_rng(seed).integers(0, len(keys),
                                              (n_boot, len(keys)))
  return 100.0 * hits[rows].sum(1) / sizes[rows].sum(1)


def run(loaded, train_utterances: int = 400, window: int = 384,
        folder=None, layers: tuple[str, ...] = ("mix",)) -> dict:
  """Both views of `loaded` (None: the log-mel floor), read from each of
  `layers` ("mix": the scalar mix of all layers; "last": the last one).

  Returns:
    {view: {"accuracy": (point, replicates [B]), "interval": Interval,
    "classes": C}}, the views named "phone", "voice" for "mix" and
    "phone_last", "voice_last" for "last".
  """
  train, valid = speech.Split("train", folder), speech.Split(
      "validation", folder)
  tr = step_table(loaded, train, range(min(train_utterances, len(train))),
                  window)
  va = step_table(loaded, valid, range(len(valid)), window)
  out = {}
  classes = {"phone": len(train.meta["phones"]),
             "voice": len(train.meta["voices"])}
  for read in layers:
    x, xe = (tr[0], va[0]) if read == "mix" else (tr[0][:, -1], va[0][:, -1])
    for view, c in classes.items():
      fitted = probe_lib.fit(x, tr[1][view], c)
      correct = probe_lib.predict(fitted, xe) == va[1][view]
      reps = grouped_replicates(correct, va[2])
      value = 100.0 * float(correct.mean())
      name = view if read == "mix" else f"{view}_{read}"
      out[name] = {"accuracy": (value, reps), "classes": c,
                   "interval": statistics.interval(value, reps)}
  return out
