"""The zoo's word2vec and FastText against gensim's, read the same ways.

    python bench/static_vs_gensim.py [--schemes skipgram,cbow,fasttext]
        [--seeds 3] [--passes 5] [--size small] [--workdir DIR]
        [--batch N] [--impls zoo,gensim]
        [--config_arg objective_args.reduction=sum,...]
        [--zoo_flags=--config.optimizer.lr=0.02]

For each scheme and seed, the zoo trains its config
(`configs/word2vec_skipgram.py`, `word2vec_cbow.py`, `fasttext_skipgram.py`
at `--size`, `--passes` passes over the sample in rows of 128 pieces,
`--batch` rows a step (default the configs' 4), `seed`) with `zoo.train`,
and gensim trains its model with the same hyper-parameters (width,
window 5, 5 noise pieces, subsampling at 1e-3, noise exponent 0.75,
FastText's n-grams of 3 to 6 in the same number of buckets, the same
passes, SGD at 0.025 per pair decaying to 0.0001, as the zoo's configs
train) on the same text: the sample's training documents, split into sentences and
pieces as the packed rows are, each sentence a list of piece strings.
gensim's vectors become a zoo word2vec table (`zoo.convert.gensim`) and
both are read the same two ways:

- the word-class suite (`data.word_classes`, 1,000 triples from Brown's
  tags): percent of triples where a word is nearer a word of its class;
- the harness's probe view on the demo's three tasks (frozen mean-pooled
  vectors, the demo's recipe), the average of the tasks' scores.

Prints one line per run, a BENCH_JSON record, and last the zoo's mean
minus gensim's for each scheme and figure beside the seeds' spread (the
larger of the two implementations' max - min over seeds).
"""

import argparse
import importlib
import json
import os
import subprocess
import sys
import time

import numpy as np

import _common  # pylint: disable=g-bad-import-order
import report
import data
import objectives
from configs.compare import demo
from data import annotate
from data import tasks as tasks_lib
from data import minimal_pairs
from data import word_classes
from zoo import loading
from zoo import models
from zoo.convert import gensim as gensim_convert
from zoo.harness import probe
from zoo.harness import statistics

CONFIGS = {"skipgram": "word2vec_skipgram", "cbow": "word2vec_cbow",
           "fasttext": "fasttext_skipgram"}
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_args(argv):
  """The command line."""
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--schemes", default="skipgram,cbow,fasttext")
  p.add_argument("--seeds", type=int, default=3)
  p.add_argument("--passes", type=int, default=5)
  p.add_argument("--size", default="small")
  p.add_argument("--batch", type=int, default=0,
                 help="rows of 128 pieces per zoo step (0: the configs')")
  p.add_argument("--impls", default="zoo,gensim",
                 help="which implementations to train and read")
  p.add_argument("--workdir", default="/tmp/static_vs_gensim")
  p.add_argument("--config_arg", default="",
                 help="the zoo configs' argument (`key=value,...` after "
                 "the config file's name)")
  p.add_argument("--zoo_flags", default="",
                 help="more zoo.train flags for the zoo's runs (their "
                 "workdirs are reused: give such runs a --workdir of their "
                 "own)")
  args = p.parse_args(argv)
  args.schemes = [s for s in args.schemes.split(",") if s]
  args.impls = [s for s in args.impls.split(",") if s]
  if not set(args.impls) <= {"zoo", "gensim"} or not args.impls:
    p.error(f"--impls {args.impls} must name zoo, gensim or both")
  return args


def corpus(tokenizer):
  """(sentences as lists of piece strings, pieces in the packed rows)."""
  first = objectives.Specials(**tokenizer.specials()).first_regular
  sentences, total = [], 0
  pieces = tokenizer.pieces()
  for text in minimal_pairs.training_texts():
    doc = annotate.annotate(tokenizer, text)
    total += len(doc["tokens"]) + 1  # and the EOS that closes it
    sentences += gensim_convert.pieces_of(doc["tokens"], doc["sentence_ids"],
                                          pieces, first)
  return sentences, total


def train_zoo(scheme, args, seed, steps):
  """zoo.train of the scheme's config; returns its `zoo.load`."""
  workdir = os.path.join(args.workdir, f"zoo_{scheme}_{seed}")
  if not os.path.isdir(os.path.join(workdir, "checkpoints", str(steps))):
    # Flags, not the config's argument: "tiny" there also shrinks the run.
    subprocess.run([sys.executable, "-m", "zoo.train", "--config",
                    f"{REPO}/configs/{CONFIGS[scheme]}.py"
                    + (f":{args.config_arg}" if args.config_arg else ""),
                    f"--config.size={args.size}", f"--config.steps={steps}",
                    f"--config.batch_size={args.batch}",
                    f"--config.seed={seed}", "--workdir", workdir]
                   + args.zoo_flags.split(),
                   cwd=REPO, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
  return loading.load(workdir)


def train_gensim(scheme, args, seed, sentences, tokenizer):
  """gensim's model of the scheme, as a `Loaded` word2vec table."""
  from gensim.models import FastText, Word2Vec  # pylint: disable=import-outside-toplevel
  cfg = models.make_config("fasttext" if scheme == "fasttext" else
                           "word2vec", args.size)
  opts = dict(vector_size=cfg.embed_dim, window=5, negative=5,
              sample=1e-3, ns_exponent=0.75, min_count=1, epochs=args.passes,
              seed=seed, workers=1, sg=0 if scheme == "cbow" else 1)
  if scheme == "fasttext":
    model = FastText(sentences, min_n=cfg.min_n, max_n=cfg.max_n,
                     bucket=cfg.ngram_buckets, **opts)
  else:
    model = Word2Vec(sentences, **opts)
  family, config, params = gensim_convert.from_gensim(model, tokenizer,
                                                      args.size)
  return loading.Loaded(family, config, params, tokenizer, None, "gensim")


def word_class_score(loaded, suite) -> float:
  """Percent of the suite's triples the vectors pass."""
  vectors = {w: loaded.word_vector(w) for w in word_classes.words(suite)}
  return 100.0 * float(word_classes.passes(vectors, suite).mean())


def probe_score(loaded, tasks, recipe) -> float:
  """The probe view's average over the tasks (validation split)."""
  scores = []
  for task in tasks.values():
    out = probe.run(loaded, task, "validation", recipe)
    scores.append(statistics.point(out["preds"], out["labels"],
                                   out["metric"]))
  return float(np.mean(scores))


def main(argv=None):
  args = parse_args(sys.argv[1:] if argv is None else argv)
  tok = data.load_tokenizer({})
  sentences, total = corpus(tok)
  args.batch = args.batch or int(importlib.import_module(
      f"configs.{CONFIGS['skipgram']}").get_config().batch_size)
  steps = -(-args.passes * total // (args.batch * 128))
  suite = word_classes.triples(tok)
  grid = demo.get_config()
  tasks = {t: tasks_lib.load(t) for t in grid.tasks}
  recipe = grid.probe.to_dict()
  print(f"corpus: {len(sentences)} sentences, {total} pieces; "
        f"{steps} zoo steps = {args.passes} passes", flush=True)
  runs = []
  for scheme in args.schemes:
    for seed in range(args.seeds):
      for impl in args.impls:
        start = time.time()
        if impl == "zoo":
          loaded = train_zoo(scheme, args, seed, steps)
        else:
          loaded = train_gensim(scheme, args, seed, sentences, tok)
        run = dict(scheme=scheme, seed=seed, impl=impl,
                   seconds=time.time() - start,
                   word_classes=word_class_score(loaded, suite),
                   probe=probe_score(loaded, tasks, recipe))
        runs.append(run)
        print(json.dumps(run), flush=True)
  _common.emit_json("static_vs_gensim", dict(
      passes=args.passes, size=args.size, pieces=total, steps=steps,
      batch=args.batch, config_arg=args.config_arg,
      zoo_flags=args.zoo_flags,
      triples=len(suite), runs=runs, machine=_common.machine()))
  print(summary(runs))


def summary(runs) -> str:
  """The last line: zoo - gensim per scheme and figure beside the spread
  (`report.static_gaps`), or each implementation's mean where only one
  ran."""
  gaps = report.static_gaps(runs)
  parts = []
  for scheme in dict.fromkeys(r["scheme"] for r in runs):
    for i, key in enumerate(("word_classes", "probe")):
      if scheme in gaps:
        diff, spread = gaps[scheme][i]
        parts.append(f"{scheme} {key} {diff:+.1f} (spread {spread:.1f})")
        continue
      for impl in dict.fromkeys(r["impl"] for r in runs
                                if r["scheme"] == scheme):
        v = [r[key] for r in runs if r["scheme"] == scheme
             and r["impl"] == impl]
        parts.append(f"{scheme} {key} {impl} {np.mean(v):.1f}")
  return "zoo - gensim: " + "; ".join(parts)


if __name__ == "__main__":
  main()
