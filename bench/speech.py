"""The masked acoustic model against random init and the log-mel input.

    python bench/speech.py [--workdir workdirs/mockingjay]
        [--config_arg "steps=2000,..."] [--train_utterances 400]
    python bench/speech.py --baselines   # two fillers of a masked span

Pre-trains Mockingjay (`configs/mockingjay_mam.py`, by default the paper's
3 layers at width 256, with learned positions, for 3,000 steps of 16
utterances x 3.84 s) unless
`--workdir` holds a finished run, then reads three rows with the speech
views (`zoo.harness.speech_probe`: frame-level phone and voice probes):

- pre-trained: the run's encoder, frozen;
- random init: the same architecture with fresh params (`--seed`);
- log-mel: the stacked input frames themselves.

Each encoder row is read from the scalar mix of its layers (as the text
probe reads every row) and from its last layer alone. Prints each view's
accuracy [95% interval over validation utterances] and the paired
difference from random init, then a BENCH_JSON record for
`bench/report.py --block speech`.
"""

import argparse
import importlib
import json
import os
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import flax.linen as nn  # pylint: disable=wrong-import-position
import jax  # pylint: disable=wrong-import-position
import numpy as np  # pylint: disable=wrong-import-position

import zoo  # pylint: disable=wrong-import-position
import _common  # pylint: disable=wrong-import-position,g-bad-import-order
from zoo import checkpoint  # pylint: disable=wrong-import-position
from zoo import loading  # pylint: disable=wrong-import-position
from zoo.harness import speech_probe  # pylint: disable=wrong-import-position
from zoo.harness import statistics  # pylint: disable=wrong-import-position

CONFIG = "configs.mockingjay_mam"
# The paper's 3 layers at width 256, past the 240 numbers of a step (2
# cores train it in about 15 minutes), with learned positions (the fixed
# codes' unit amplitude hides part of each step from a linear probe),
# Adam at 5e-4 warmed up over the first 7% of 3,000 steps of 16 x 3.84 s.
DEFAULT_ARG = ("steps=3000,model_args.embed_dim=256,model_args.num_heads=4,"
               "model_args.mlp_dim=1024,model_args.positions=learned,"
               "optimizer.lr=5e-4,optimizer.warmup_steps=210,"
               "checkpoint_every=500,eval_every=500")


def pretrain(workdir: str, arg: str) -> float | None:
  """Trains the config into `workdir` unless done; the seconds it took
  (None: trained before)."""
  from zoo import train as train_lib  # pylint: disable=import-outside-toplevel
  config = importlib.import_module(CONFIG).get_config(arg)
  if os.path.isdir(os.path.join(workdir, "checkpoints")):
    done = checkpoint.restore_params(workdir)[1]
    if done >= int(config.steps):
      return None
  start = time.perf_counter()
  train_lib.train(config, workdir)
  return time.perf_counter() - start


def random_row(loaded, seed: int):
  """`loaded`'s architecture with fresh params."""
  model = loaded.model
  x = np.zeros((1, 3 * loaded.config.downsample, loaded.config.num_mels),
               np.float32)
  params = jax.jit(model.init)(jax.random.key(seed), x)["params"]
  params = nn.meta.unbox(params)
  return loading.Loaded(loaded.family, loaded.config, params, None, 0,
                        "random init")


def span_baselines(spans=(1, 3, 7), per_utterance: int = 5,
                   seed: int = 0) -> dict[int, dict[str, float]]:
  """L1 (as `mam` scores it) of two fillers of a span of masked steps on
  the validation utterances: the utterance's mean step, and the straight
  line between the span's two neighbours. Spans drawn uniformly,
  `per_utterance` each; R as Mockingjay's default."""
  from data import speech  # pylint: disable=import-outside-toplevel
  split, r = speech.Split("validation"), speech_probe.speech_downsample()
  rng, out = np.random.default_rng(seed), {}
  for span in spans:
    errs = {"utterance mean": [], "interpolation": []}
    for u in range(len(split)):
      frames = split.utterance(u)[0]
      n = len(frames) // r
      steps = frames[:n * r].reshape(n, -1)
      for a in rng.integers(1, n - span - 1, per_utterance):
        target, w = steps[a:a + span], np.arange(1, span + 1)[:, None]
        line = steps[a - 1] + (steps[a + span] - steps[a - 1]) * w / (
            span + 1)
        errs["utterance mean"].append(np.abs(target - steps.mean(0)).mean())
        errs["interpolation"].append(np.abs(target - line).mean())
    out[span] = {k: round(float(np.mean(v)), 3) for k, v in errs.items()}
  return out


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--workdir", default="workdirs/mockingjay")
  parser.add_argument("--config_arg", default=DEFAULT_ARG)
  parser.add_argument("--train_utterances", type=int, default=400)
  parser.add_argument("--seed", type=int, default=1)
  parser.add_argument("--baselines", action="store_true",
                      help="only print span_baselines and exit")
  a = parser.parse_args(argv)
  if a.baselines:
    for span, errs in span_baselines().items():
      print(f"span {span}: " + ", ".join(f"{k} {v}" for k, v in errs.items()))
    return
  seconds = pretrain(a.workdir, a.config_arg)
  trained = zoo.load(a.workdir)
  rows = {"pre-trained": trained, "random init": random_row(trained, a.seed),
          "log-mel input": None}
  views = {}
  for name, loaded in rows.items():
    start = time.perf_counter()
    views[name] = speech_probe.run(
        loaded, a.train_utterances,
        layers=("mix",) if loaded is None else ("mix", "last"))
    print(f"{name}: read in {time.perf_counter() - start:.0f} s", flush=True)
  record = {"config": f"{CONFIG}:{a.config_arg}",
            "pretrain_seconds": None if seconds is None else round(seconds, 1),
            "steps": trained.step, "train_utterances": a.train_utterances,
            "final_loss": _final_loss(a.workdir), "rows": {},
            "machine": _common.machine()}
  base = views["random init"]
  for name, v in views.items():
    record["rows"][name] = {
        view: {"accuracy": v[view]["interval"].to_json(),
               "delta": (None if name == "random init" else
                         statistics.paired(
                             v[view]["accuracy"],
                             base[view]["accuracy"]).to_json()),
               "classes": v[view]["classes"]} for view in v}
  for name, r in record["rows"].items():
    print(name, {k: v["accuracy"] for k, v in r.items()})
  _common.emit_json("speech", record)


def _final_loss(workdir: str) -> float | None:
  """The last training loss logged in the workdir."""
  path = pathlib.Path(workdir) / "metrics.jsonl"
  lines = [json.loads(x) for x in path.read_text().splitlines() if x]
  train = [x for x in lines if x.get("split", "train") == "train"
           and "loss" in x]
  return round(train[-1]["loss"], 4) if train else None


if __name__ == "__main__":
  main()
