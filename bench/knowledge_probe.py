"""What trained encoders know of WordNet's held-out hypernyms.

    python bench/knowledge_probe.py --workdirs DIR[,DIR...] [--limit N]
        [--split held_out|seen]

Asks every workdir's encoder (an MLM head: BERT, ERNIE, ...) the cloze
questions of `data.knowledge_probe` ("a dog is a kind of <mask>.") about
hypernym pairs that no training on the knowledge base saw (`--split
seen`: pairs TransE trained on), and ranks each
fact's answer among the probe's distinct answers at the mask. An ERNIE
reads the question's linked entities as it read its rows (`zoo.load`'s
`entity_vectors`), and answers twice: its MLM head ranks answer pieces, its
dEA head ranks the answers' entities (`Loaded.entity_logits`); TransE
itself ranks the same entities from the subject's vector and the hypernym
relation's (a random ranking beside it). Beside each workdir the same
family and config at random init answers too. Prints, per model and head,
precision at 1 and the mean reciprocal rank (x 100) with 95% bootstrap
intervals over facts, the difference to its random init (paired, * where
the interval excludes 0), and a BENCH_JSON record.
"""

import argparse
import json
import os

import jax
import jax.numpy as jnp
import numpy as np

import _common  # pylint: disable=g-bad-import-order
from data import knowledge_probe
from data import linking
from objectives import ernie
from zoo import knowledge
from zoo import loading
from zoo import models
from zoo.harness import statistics


def _metrics(ranks: np.ndarray) -> dict[str, np.ndarray]:
  """Per fact, "p_at_1" (1 or 0) and "mrr" (1 / rank) (`statistics`'
  "mean" reports them x 100)."""
  return {"p_at_1": (ranks == 1).astype(np.float64), "mrr": 1.0 / ranks}


def scores(loaded, facts) -> dict[str, np.ndarray]:
  """An encoder's MLM head: each fact's answer piece among the probe's."""
  logits = loaded.mask_logits([f.text for f in facts])
  return _metrics(knowledge_probe.rank(
      logits, np.asarray([f.answer_id for f in facts])))


def entity_scores(loaded, facts) -> dict[str, np.ndarray]:
  """ERNIE's dEA head: each fact's answer entity among the probe's."""
  candidates, columns = knowledge_probe.entity_candidates(facts)
  logits = loaded.entity_logits([f.text for f in facts], candidates)
  return _metrics(knowledge_probe.rank(logits, columns))


def transe_scores(kb: str, dim: int, facts, seed: int = 0):
  """TransE alone (e_h + w_hypernym against each candidate), and a random
  ranking in its random column."""
  candidates, columns = knowledge_probe.entity_candidates(facts)
  heads = np.asarray([f.subject_entity for f in facts])
  logits = knowledge.transe_logits(kb, knowledge.TransE(dim=dim), heads,
                                   "hypernym", candidates)
  noise = np.random.default_rng(seed).standard_normal(logits.shape)
  return {"trained": _metrics(knowledge_probe.rank(logits, columns)),
          "random": _metrics(knowledge_probe.rank(noise, columns))}


def random_twin(loaded):
  """The same family and config at random init (seed 0); a dEA head too,
  beside the same fixed entity table."""
  params = models.init_params(loaded.family, loaded.config,
                              jax.random.key(0), heads=True)
  heads = dict(loaded.heads)
  if "dea" in heads:
    width = jnp.zeros((1, loaded.config.embed_dim))
    heads["dea"] = ernie.dea_head(loaded.config).init(
        jax.random.key(1), width)["params"]
  return loading.Loaded(loaded.family, loaded.config, params,
                        loaded.tokenizer, None, "random",
                        run_config=loaded.run_config, heads=heads)


def summarize(name: str, family: str, head: str, got: dict, facts,
              candidates: int) -> dict:
  """One row: each metric's trained and random summaries and their paired
  difference ([point, low, high])."""
  row = {"workdir": name, "family": family, "head": head,
         "facts": len(facts), "candidates": candidates}
  for metric in ("p_at_1", "mrr"):
    sums = {k: statistics.summarize(v[metric], None, "mean")
            for k, v in got.items()}
    delta = statistics.paired((sums["trained"][0].mean, sums["trained"][1]),
                              (sums["random"][0].mean, sums["random"][1]))
    row[metric] = {k: [s[0].mean, s[0].low, s[0].high]
                   for k, s in sums.items()}
    row[metric]["delta"] = [delta.mean, delta.low, delta.high]
  print(json.dumps(row), flush=True)
  return row


def probe(workdir: str, limit: int | None, split: str) -> list[dict]:
  """The rows of one workdir: its MLM head, and its dEA head if it has
  one, each beside its random init."""
  loaded = loading.load(workdir)
  kb = (loaded.run_config or {}).get("data", {}).get("entities") or "wordnet"
  facts = knowledge_probe.facts(linking.linker(kb), loaded.tokenizer, limit,
                                split)
  name = os.path.basename(workdir.rstrip("/"))
  twin = random_twin(loaded)
  rows = [summarize(name, loaded.family, "mlm",
                    {"trained": scores(loaded, facts),
                     "random": scores(twin, facts)},
                    facts, len({f.answer_id for f in facts}))]
  if "dea" in loaded.heads:
    entities = len({f.answer_entity for f in facts})
    rows.append(summarize(name, loaded.family, "dea",
                          {"trained": entity_scores(loaded, facts),
                           "random": entity_scores(twin, facts)},
                          facts, entities))
    rows.append(summarize("TransE", "-", "transe", transe_scores(
        kb, loaded.config.entity_dim, facts), facts, entities))
  return rows


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--workdirs", required=True)
  p.add_argument("--limit", type=int, default=None)
  p.add_argument("--split", choices=knowledge_probe.SPLITS,
                 default="held_out")
  args = p.parse_args(argv)
  rows = [r for w in args.workdirs.split(",")
          for r in probe(w, args.limit, args.split)]
  _common.emit_json("knowledge_probe", {"rows": rows, "split": args.split,
                                        "machine": _common.machine()})


if __name__ == "__main__":
  main()
