"""Evaluation throughput: the harness's scoring and probe features against
the model's bare forward at full batch.

    python bench/eval_throughput.py [--config configs/compare/demo.py]
        [--rows random_bert,random_gpt2,random_t5] [--rounds 3]

For each random-init row of the grid (speed does not depend on the
weights), two views of `zoo.compare`, each compiled first, then timed in
turns with its reference, round after round, so the host's drift falls on
both:

- `minimal_pairs`: `zoo.harness.minimal_pairs.run` over the grid's whole
  suite. Its work is the model rows the row's scoring runs: one masked
  copy per scored piece (pseudo-log-likelihood, T5's sentinel scoring),
  one row per text (causal scoring). The reference is the same scorer
  (`zoo.scoring.score_one`) on one full chunk of `CHUNK_TOKENS` pieces at
  each text length rounded up to 8, times the chunks those rows fill.
- `probe`: `zoo.harness.probe.features` over every task's training and
  evaluation texts. The reference is the backbone's forward on one chunk
  of 128 texts tokenised beforehand (`zoo.loading._embed`), times the
  chunks the texts fill.

Each line gives a view's seconds, its reference's, and their ratio
(`at_forward_speed`: reference / view, 1.0 = the view runs at the
forward's full batch speed; the rest is tokenisation, partly filled
chunks, padding and host work). The last line is the ratios.
"""

import argparse
import importlib
import json
import statistics
import time

import jax

import _common  # pylint: disable=g-bad-import-order
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
      rows = int(scoring.scored_pieces(tokens, loaded.config, specials).sum())
    out[length] = out.get(length, 0) + rows
  return out


def scoring_calls(loaded, need: dict[int, int], specials) -> list:
  """[(chunks, call)]: per length, the scorer on one full chunk of
  `CHUNK_TOKENS` pieces, and how many chunks `need`'s rows fill (a
  fraction for the last)."""
  sp = scoring._specials(loaded.config, specials)  # pylint: disable=protected-access
  out = []
  for length, rows in sorted(need.items()):
    size = max(1, scoring.CHUNK_TOKENS // length)
    tokens = jax.numpy.full((size, length), 7, jax.numpy.int32)
    at = jax.numpy.full((size,), length // 2, jax.numpy.int32)
    call = lambda t=tokens, a=at: jax.block_until_ready(scoring.score_one(  # pylint: disable=g-long-lambda
        loaded.family, loaded.config, loaded.params, t, a, sp,
        loaded.scoring_method))
    out.append((rows / size, call))
  return out


def probe_calls(loaded, texts: list[str], max_len: int,
                batch: int = 128) -> list:
  """[(chunks, call)]: the backbone's forward on one chunk of `batch`
  texts tokenised beforehand, and how many chunks `texts` fill."""
  tokens, sentences = loaded._rows(texts[:batch], max_len)  # pylint: disable=protected-access
  sentences = None if sentences is None else jax.numpy.asarray(sentences)
  tokens = jax.numpy.asarray(tokens)
  call = lambda: jax.block_until_ready(loading._embed(  # pylint: disable=protected-access,g-long-lambda
      loaded.family, loaded.config, loaded.params, tokens, sentences))
  return [(-(-len(texts) // batch), call)]


def probe_texts(inputs) -> list[str]:
  return [ex["text"] for task in inputs.tasks.values()
          for split in (task.train, task.splits[inputs.split])
          for ex in split]


def timed(fn) -> float:
  start = time.perf_counter()
  fn()
  return time.perf_counter() - start


def reference_seconds(calls: list) -> float:
  """Seconds of `calls`: each call's median of 3, times its chunks."""
  return sum(n * _common.median_seconds(call, 3, 1) for n, call in calls)


def measure_row(grid, inputs, cell, rounds: int) -> dict:
  """The two views of one row and their references, in turns."""
  loaded, _ = run_lib._Backbone(grid, cell, "", inputs).get()  # pylint: disable=protected-access
  texts = pair_texts(inputs.pairs)
  need = scoring_rows(loaded, texts, inputs.specials)
  max_len, ptexts = int(grid.probe.max_len), probe_texts(inputs)
  views = {"minimal_pairs": lambda: minimal_pairs.run(loaded, inputs.pairs),
           "probe": lambda: probe.features(loaded, ptexts, max_len)}
  calls = {"minimal_pairs": scoring_calls(loaded, need, inputs.specials),
           "probe": probe_calls(loaded, ptexts, max_len)}
  for view in views:  # compile every shape
    views[view]()
    reference_seconds(calls[view])
  times = {k: [] for v in views for k in (v, f"{v}_forward")}
  for _ in range(rounds):
    for view, fn in views.items():
      times[view].append(timed(fn))
      times[f"{view}_forward"].append(reference_seconds(calls[view]))
  med = {k: statistics.median(v) for k, v in times.items()}
  return {
      "row": cell.name, "family": loaded.family,
      "scoring": loaded.scoring_method,
      "texts": len(texts), "model_rows": sum(need.values()),
      "probe_texts": len(ptexts),
      **{f"{k}_s": round(v, 3) for k, v in med.items()},
      **{f"{v}_at_forward_speed": round(med[f"{v}_forward"] / med[v], 3)
         for v in views}}


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
