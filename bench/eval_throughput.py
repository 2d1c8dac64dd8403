"""Evaluation throughput: the harness's scoring and probe features against
the model's bare forward at full batch.

    python bench/eval_throughput.py [--config configs/compare/demo.py]
        [--rows random_bert,random_gpt2,random_t5] [--rounds 3]

For each random-init row of the grid (speed does not depend on the
weights), two views of `zoo.compare`, each compiled first and then timed in
turns with its reference, on this host, so the drift falls on both:

- `minimal_pairs`: `zoo.harness.minimal_pairs.run` over the grid's whole
  suite. Its work is the model rows the row's scoring runs: one masked
  copy per scored piece (pseudo-log-likelihood, T5's sentinel scoring),
  one row per text (causal scoring). The reference runs the same scorer
  (`zoo.scoring.score_one`) on full chunks of `CHUNK_TOKENS` pieces at
  each text length rounded up to 8: the seconds those rows cost at the
  forward's full batch speed.
- `probe`: `zoo.harness.probe.features` over every task's training and
  evaluation texts. The reference runs the backbone's forward on
  pre-tokenised full chunks of the same shape (`zoo.loading._embed`).

Each line gives a view's seconds, its reference's, and their ratio
(`at_forward_speed`: reference / view, 1.0 = the view runs at the
forward's full batch speed; the rest is tokenisation, chunking, padding
and host work). The last line is the ratios.
"""

import argparse
import importlib
import json
import statistics
import time

import jax
import numpy as np

import _common  # pylint: disable=g-bad-import-order
from objectives import noise
from zoo import loading
from zoo import scoring
from zoo.harness import cells as cells_lib
from zoo.harness import minimal_pairs
from zoo.harness import probe
from zoo.harness import run as run_lib


def _grid(config: str):
  path, _, arg = config.partition(":")
  module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
  return module.get_config(arg or None)


def pair_texts(pairs: dict) -> list[str]:
  """Every sentence of the suite, as the view scores them."""
  return [t for items in pairs.values() for pair in items
          for t in (pair.good, pair.bad)]


def scoring_rows(loaded, texts: list[str], specials) -> dict[int, int]:
  """{T: model rows the scoring runs at length T (a multiple of 8)}."""
  how = loaded.scoring_method
  out: dict[int, int] = {}
  for text in texts:
    tokens = loaded.batch([text])
    length = int(scoring._pad_length(tokens, loaded.config).shape[1])  # pylint: disable=protected-access
    rows = 1
    if how not in scoring._WHOLE_ROW:  # pylint: disable=protected-access
      real = tokens != loaded.config.pad_id
      rows = int((real & np.asarray(noise.eligible(tokens, specials))).sum())
    out[length] = out.get(length, 0) + rows
  return out


def scoring_reference(loaded, need: dict[int, int], specials):
  """() -> None: the scorer over `need`'s rows in full chunks."""
  how = loaded.scoring_method
  sp = scoring._specials(loaded.config, specials)  # pylint: disable=protected-access
  params = loaded.params
  calls = []
  for length, rows in sorted(need.items()):
    size = max(1, scoring.CHUNK_TOKENS // length)
    full, part = divmod(rows, size)
    tokens = np.full((size, length), 7, np.int32)
    at = np.full((size,), length // 2, np.int32)
    calls.append((full, part / size, tokens, at))
  fn = lambda tokens, at: scoring.score_one(  # pylint: disable=g-long-lambda
      loaded.family, loaded.config, params, tokens, at, sp, how)

  def run():
    for full, _, tokens, at in calls:
      for _ in range(full):
        jax.block_until_ready(fn(tokens, at))
  # A fraction of a chunk costs its fraction of a full call.
  fractions = [(frac, tokens, at) for _, frac, tokens, at in calls if frac]
  return run, fractions, fn


def probe_texts(inputs) -> list[str]:
  return [ex["text"] for task in inputs.tasks.values()
          for split in (task.train, task.splits[inputs.split])
          for ex in split]


def probe_reference(loaded, texts: list[str], max_len: int,
                    batch: int = 128):
  """() -> None: the forward over `texts`' chunks, tokenised beforehand."""
  chunks = []
  for start in range(0, len(texts), batch):
    chunk = list(texts[start:start + batch])
    chunk += [chunk[0]] * (batch - len(chunk))
    tokens, sentences = loaded._rows(chunk, max_len)  # pylint: disable=protected-access
    chunks.append((jax.numpy.asarray(tokens),
                   None if sentences is None else jax.numpy.asarray(sentences)))

  def run():
    for tokens, sentences in chunks:
      jax.block_until_ready(loaded_embed(loaded, tokens, sentences))
  return run


def loaded_embed(loaded, tokens, sentences):
  return loading._embed(loaded.family, loaded.config, loaded.params, tokens,  # pylint: disable=protected-access
                        sentences)


def timed(fn) -> float:
  start = time.perf_counter()
  fn()
  return time.perf_counter() - start


def measure_row(grid, inputs, cell, rounds: int) -> dict:
  """The two views of one row and their references, in turns."""
  backbone = run_lib._Backbone(grid, cell, "", inputs)  # pylint: disable=protected-access
  loaded, _ = backbone.get()
  texts = pair_texts(inputs.pairs)
  need = scoring_rows(loaded, texts, inputs.specials)
  ref_mp, fractions, score_fn = scoring_reference(loaded, need,
                                                  inputs.specials)
  max_len = int(grid.probe.max_len)
  ptexts = probe_texts(inputs)
  ref_probe = probe_reference(loaded, ptexts, max_len)
  fns = {
      "minimal_pairs": lambda: minimal_pairs.run(loaded, inputs.pairs),
      "minimal_pairs_forward": ref_mp,
      "probe": lambda: probe.features(loaded, ptexts, max_len),
      "probe_forward": ref_probe}
  for fn in fns.values():  # compile every shape
    fn()
  for _, tokens, at in fractions:
    jax.block_until_ready(score_fn(tokens, at))
  times = {k: [] for k in fns}
  for _ in range(rounds):
    for key, fn in fns.items():
      times[key].append(timed(fn))
  med = {k: statistics.median(v) for k, v in times.items()}
  part = sum(frac * _common.median_seconds(
      lambda t=tokens, a=at: jax.block_until_ready(score_fn(t, a)), 3, 1)
             for frac, tokens, at in fractions)
  med["minimal_pairs_forward"] += part
  return {
      "row": cell.name, "family": loaded.family,
      "scoring": loaded.scoring_method,
      "texts": len(texts), "model_rows": sum(need.values()),
      "probe_texts": len(ptexts),
      **{f"{k}_s": round(v, 3) for k, v in med.items()},
      "minimal_pairs_at_forward_speed": round(
          med["minimal_pairs_forward"] / med["minimal_pairs"], 3),
      "probe_at_forward_speed": round(
          med["probe_forward"] / med["probe"], 3)}


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--config", default="configs/compare/demo.py")
  p.add_argument("--rows", default="",
                 help="random-init rows to read (default: every one)")
  p.add_argument("--rounds", type=int, default=3)
  args = p.parse_args(argv)
  grid = _grid(args.config)
  inputs = run_lib._Inputs(grid)  # pylint: disable=protected-access
  wanted = [r for r in args.rows.split(",") if r]
  rows = [c for c in cells_lib.parse_cells(grid)
          if not c.pretrained and not c.source
          and (not wanted or c.name in wanted)]
  if not rows:
    raise SystemExit(f"no random-init row named {wanted} in {args.config}")
  ratios = {}
  for cell in rows:
    out = measure_row(grid, inputs, cell, args.rounds)
    print(json.dumps(out), flush=True)
    ratios[cell.name] = [out["minimal_pairs_at_forward_speed"],
                         out["probe_at_forward_speed"]]
  print("at forward speed (minimal pairs, probe): " + ", ".join(
      f"{k} {a:.2f} {b:.2f}" for k, (a, b) in ratios.items()))


if __name__ == "__main__":
  main()
