"""What trained encoders know of WordNet's held-out hypernyms.

    python bench/knowledge_probe.py --workdirs DIR[,DIR...] [--limit N]

Asks every workdir's encoder (an MLM head: BERT, ERNIE, ...) the cloze
questions of `data.knowledge_probe` ("a dog is a kind of <mask>.") about
hypernym pairs that no training on the knowledge base saw, and ranks each
fact's answer among the probe's distinct answers at the mask. An ERNIE
reads the question's linked entities as it read its rows (`zoo.load`'s
`entity_vectors`). Beside each workdir the same family and config at random
init answers too. Prints, per model, precision at 1 and the mean
reciprocal rank (x 100) with 95% bootstrap intervals over facts, the
difference to its random init (paired, * where the interval excludes 0),
and a BENCH_JSON record.
"""

import argparse
import json
import os

import jax
import numpy as np

import _common  # pylint: disable=g-bad-import-order
from data import knowledge_probe
from data import linking
from zoo import loading
from zoo import models
from zoo.harness import statistics


def scores(loaded, facts) -> dict[str, np.ndarray]:
  """Per fact, "p_at_1" (1 or 0) and "mrr" (1 / rank) of a loaded
  encoder (`statistics`' "mean" reports them x 100)."""
  logits = loaded.mask_logits([f.text for f in facts])
  ranks = knowledge_probe.rank(logits, np.asarray([f.answer_id
                                                   for f in facts]))
  return {"p_at_1": (ranks == 1).astype(np.float64), "mrr": 1.0 / ranks}


def random_twin(loaded):
  """The same family and config at random init (seed 0)."""
  params = models.init_params(loaded.family, loaded.config,
                              jax.random.key(0), heads=True)
  return loading.Loaded(loaded.family, loaded.config, params,
                        loaded.tokenizer, None, "random",
                        run_config=loaded.run_config)


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--workdirs", required=True)
  p.add_argument("--limit", type=int, default=None)
  args = p.parse_args(argv)
  rows = []
  for workdir in args.workdirs.split(","):
    loaded = loading.load(workdir)
    kb = (loaded.run_config or {}).get("data", {}).get("entities") or "wordnet"
    facts = knowledge_probe.facts(linking.linker(kb), loaded.tokenizer,
                                  args.limit)
    got = {"trained": scores(loaded, facts),
           "random": scores(random_twin(loaded), facts)}
    row = {"workdir": os.path.basename(workdir.rstrip("/")),
           "family": loaded.family, "facts": len(facts),
           "candidates": len({f.answer_id for f in facts})}
    for metric in ("p_at_1", "mrr"):
      sums = {k: statistics.summarize(v[metric], None, "mean")
              for k, v in got.items()}
      delta = statistics.paired((sums["trained"][0].mean, sums["trained"][1]),
                                (sums["random"][0].mean, sums["random"][1]))
      row[metric] = {k: [s[0].mean, s[0].low, s[0].high]
                     for k, s in sums.items()}
      row[metric]["delta"] = [delta.mean, delta.low, delta.high]
    rows.append(row)
    print(json.dumps(row), flush=True)
  _common.emit_json("knowledge_probe", {"rows": rows,
                                        "machine": _common.machine()})


if __name__ == "__main__":
  main()
