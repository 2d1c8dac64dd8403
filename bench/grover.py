"""Grover's measurements: body perplexity with and without the metadata,
generated bodies, and a discriminator of generated from real ones.

    python bench/grover.py [--workdir RUN] [--steps 1500] [--out FILE]
        [--gen_len 128] [--top_p 0.9] [--top_k 0] [--disc_steps 200]
        [--opening 32] [--limit N] [--no_random]

Without `--workdir` the generator is pre-trained first: `zoo.train` of
`configs/gpt2_grover.py` (`--config_arg`, by default the tiny GPT-2 widened
to 4 layers of 128 with a 256-row position table) for `--steps` steps of
`--batch` rows of `--seq_len` pieces into `--train_dir` (a complete run
there is reused); the default took 12 minutes on a 2-core CPU shared with
another job (the whole bench 19). Then, on the article sample's validation
split (`data.articles`; each article a row as the loader reads it,
`zoo.grover.article_row`):

1. Body perplexity. Each article is cut to the run's `seq_len` and laid
   out twice by the scheme's own layout (`zoo.grover.layout`, i.e.
   `objectives.fields.arrange`): topic and headline as context, then the
   body (the canonical Grover order), and the body alone (the other fields
   dropped). Both score the same body pieces (those after the body's begin
   marker: `zoo.grover.field_nll`). Per article the mean negative
   log-likelihood per piece; the perplexity is exp of its mean over
   articles, with a 95% bootstrap interval over articles
   (`zoo.harness.statistics`), and the paired difference without - with
   (in nats per piece, and as a perplexity ratio). The same again over
   each body's first `--opening` pieces only, where the headline should
   tell most.
2. Generation. A fixed-seed permutation splits the articles into a
   discriminator-train and a discriminator-test half, and each half into
   articles whose body is generated and articles whose real body is kept
   (no article gives both, none is in both halves). Generated bodies are
   sampled (`zoo.grover.write_field`, nucleus `--top_p` or `--top_k`,
   `--gen_len` pieces at most, stopping at the body's end marker) after the
   article's topic and headline; each real body is cut to the length of a
   generated one of its half (so length tells nothing).
3. Discriminator. As the paper does, the generator's own backbone is
   fine-tuned to tell generated bodies from real ones (`zoo.finetune`, the
   whole GPT-2 with ULMFiT's concat-pooling head: last, max and mean
   states; the finetune package's only class head for a decoder, text in
   as `[cls] body [sep]`), on the train half; accuracy on the test half
   with a 95% bootstrap interval, beside chance (the test half's majority
   share) and the same recipe on a random-init GPT-2 of the same config
   (paired difference; `--no_random` skips it).

Prints a markdown table, a BENCH_JSON record (`bench/report.py --block
grover` renders it; so does the `--out` JSON file), and last the ratios.
"""

import argparse
import json
import os
import subprocess
import sys
import time

import jax
import numpy as np

import _common  # pylint: disable=g-bad-import-order
import data.tasks
from data import sources
from zoo import finetune
from zoo import grover
from zoo import loading
from zoo.harness import statistics

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG_ARG = ("tiny,model_args.embed_dim=128,model_args.num_layers=4,"
              "model_args.mlp_dim=512,model_args.max_len=256")
C, T, D = grover.CONTEXT, grover.TARGET, grover.DROPPED


def parse_args(argv):
  """The command line."""
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--workdir", default=None,
                 help="a trained gpt2_grover run; default: train one")
  p.add_argument("--train_dir", default="/tmp/grover_bench/gpt2_grover")
  p.add_argument("--config_arg", default=CONFIG_ARG)
  p.add_argument("--steps", type=int, default=1500)
  p.add_argument("--batch", type=int, default=8)
  p.add_argument("--seq_len", type=int, default=256)
  p.add_argument("--opening", type=int, default=32,
                 help="also score each body's first N pieces alone")
  p.add_argument("--gen_len", type=int, default=128)
  p.add_argument("--top_p", type=float, default=0.9)
  p.add_argument("--top_k", type=int, default=0)
  p.add_argument("--disc_steps", type=int, default=200)
  p.add_argument("--disc_lr", type=float, default=5e-4)
  p.add_argument("--disc_max_len", type=int, default=160)
  p.add_argument("--no_random", action="store_true",
                 help="skip the random-init discriminator")
  p.add_argument("--limit", type=int, default=None,
                 help="only the first N validation articles (smoke runs)")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--out", default="/tmp/grover_bench/results.json")
  return p.parse_args(argv)


def pretrain(args) -> str:
  """`zoo.train` of the Grover GPT-2 into `--train_dir` (reused when its
  last checkpoint is there); returns the workdir."""
  workdir = args.train_dir
  if os.path.isdir(os.path.join(workdir, "checkpoints", str(args.steps))):
    return workdir
  os.makedirs(workdir, exist_ok=True)
  flags = [f"--config.steps={args.steps}", f"--config.batch_size={args.batch}",
           f"--config.seq_len={args.seq_len}", f"--config.seed={args.seed}",
           f"--config.checkpoint_every={args.steps}", "--config.log_every=100",
           "--config.eval_every=0", "--config.eval_steps=10",
           f"--config.optimizer.warmup_steps={max(1, args.steps // 20)}"]
  with open(os.path.join(workdir, "train.log"), "w") as log:
    subprocess.run([sys.executable, "-m", "zoo.train", "--config",
                    f"{REPO}/configs/gpt2_grover.py:{args.config_arg}",
                    "--workdir", workdir] + flags,
                   cwd=REPO, check=True, stdout=log, stderr=log)
  return workdir


def mean_interval(values, seed: int = 0):
  """(Interval of the mean of `values` [N], its replicates [B]), in the
  values' units (`statistics` works in percent)."""
  got, reps = statistics.summarize(np.asarray(values, np.float64)[None],
                                   None, "mean", seed=seed)
  scale = lambda x: x / 100.0
  return (statistics.Interval(scale(got.mean), scale(got.low),
                              scale(got.high)), scale(reps))


def body_nll(loaded, rows, groups, length: int, batch: int = 32):
  """Per article, nats per body piece (float64 [N]) and pieces scored
  ([N]) under `groups` (topic, headline, body), rows cut to `length`."""
  cut = [{k: v[:length] for k, v in r.items()} for r in rows]
  laid = grover.layout(cut, groups, length)
  sums, counts = [], []
  for i in range(0, len(cut), batch):
    tok, fid = (laid[k][i:i + batch] for k in ("tokens", "field_ids"))
    fill = batch - len(tok)  # whole batches: one program
    tok, fid = (np.pad(x, ((0, fill), (0, 0))) for x in (tok, fid))
    s, n = grover.field_nll(loaded.params, tok, fid, family=loaded.family,
                            config=loaded.config, field=grover.BODY)
    sums.append(np.asarray(s)[:batch - fill])
    counts.append(np.asarray(n)[:batch - fill])
  sums, counts = np.concatenate(sums), np.concatenate(counts)
  return sums / counts, counts


def perplexity(loaded, rows, length: int) -> dict:
  """Body perplexity with and without the metadata, their difference."""
  with_nll, n_with = body_nll(loaded, rows, (C, C, T), length)
  without_nll, n_without = body_nll(loaded, rows, (D, D, T), length)
  if not (n_with == n_without).all():
    raise AssertionError("the two layouts scored different body pieces")
  a, ra = mean_interval(with_nll)
  b, rb = mean_interval(without_nll)
  diff = statistics.paired((b.mean, rb), (a.mean, ra))
  ppl = lambda i: [float(np.exp(x)) for x in (i.mean, i.low, i.high)]
  gap = statistics.interval(np.exp(b.mean) - np.exp(a.mean),
                            np.exp(rb) - np.exp(ra))
  return {"articles": len(rows), "pieces": float(n_with.sum()),
          "nll_with": a.to_json(), "nll_without": b.to_json(),
          "ppl_with": ppl(a), "ppl_without": ppl(b),
          "nll_diff": diff.to_json(), "ppl_ratio": ppl(diff),
          "ppl_diff": gap.to_json()}


def opening(row, k: int) -> dict:
  """An article row cut after its body's begin marker and k pieces."""
  start = np.flatnonzero(row["field_ids"] == grover.BODY)[0]
  return {key: v[:start + 1 + k] for key, v in row.items()}


def split(n: int, seed: int) -> dict[str, dict[str, np.ndarray]]:
  """Article indices: half -> role ("generated", "real") -> int [~N/4]."""
  order = np.random.default_rng(seed).permutation(n)
  halves = {"train": order[:n // 2], "test": order[n // 2:]}
  return {h: {"generated": idx[:len(idx) // 2], "real": idx[len(idx) // 2:]}
          for h, idx in halves.items()}


def real_body(row) -> list[int]:
  """The body's pieces of an article row, without its markers."""
  return row["tokens"][row["field_ids"] == grover.BODY][1:-1].tolist()


def bodies(loaded, rows, parts, args) -> dict[str, list[dict]]:
  """half -> examples {"inputs", "targets", "label", "article", "pieces"}:
  generated bodies (label 1) and real ones cut to a generated one's
  length (label 0)."""
  tok = loaded.tokenizer
  prompts = grover.prompts(rows, (C, C, T), grover.BODY)
  out, key = {}, jax.random.key(args.seed)
  for j, (half, roles) in enumerate(parts.items()):
    gen = grover.write_field(
        loaded, [prompts[i] for i in roles["generated"]], grover.BODY,
        jax.random.fold_in(key, j), max_len=args.gen_len, top_k=args.top_k,
        top_p=args.top_p)
    lengths = [len(g) for g in gen]
    real = [real_body(rows[i])[:lengths[k % len(lengths)]]
            for k, i in enumerate(roles["real"])]
    out[half] = (
        [_example(tok, g, 1, i) for g, i in zip(gen, roles["generated"])]
        + [_example(tok, r, 0, i) for r, i in zip(real, roles["real"])])
  return out


def _example(tok, ids: list[int], label: int, article) -> dict:
  return {"inputs": tok.decode(ids), "targets": ("real", "generated")[label],
          "label": label, "article": int(article), "pieces": len(ids)}


def discriminate(loaded, examples, args, params) -> dict:
  """Fine-tunes the backbone (`params`; None: random init) on the train
  half; test accuracy with its interval and replicates."""
  task = data.tasks.Task("grover_discriminator", "class", "accuracy",
                         ["real", "generated"],
                         {"train": examples["train"],
                          "validation": examples["test"]})
  metrics, state = finetune.finetune(
      loaded.family, loaded.config, params, task, loaded.tokenizer,
      mode="full", head="ulmfit", seed=args.seed, steps=args.disc_steps,
      batch_size=16, lr=args.disc_lr, max_len=args.disc_max_len,
      splits=("validation",), return_state=True)
  preds = state.predictions["validation"]
  labels = np.asarray([ex["label"] for ex in examples["test"]])
  got, reps = statistics.summarize(preds, labels, "accuracy", seed=args.seed)
  return {"accuracy": got.to_json(), "reps": reps,
          "train_loss": metrics["train/loss"]}


def discriminators(loaded, examples, args) -> dict:
  """The trained and (unless `--no_random`) random-init discriminators,
  chance and their paired difference."""
  labels = np.asarray([ex["label"] for ex in examples["test"]])
  out = {"train": len(examples["train"]), "test": len(labels),
         "chance": 100.0 * max(labels.mean(), 1 - labels.mean())}
  runs = {"trained": loaded.params}
  if not args.no_random:
    runs["random"] = None
  for name, params in runs.items():
    start = time.time()
    out[name] = discriminate(loaded, examples, args, params)
    out[name]["seconds"] = time.time() - start
  if "random" in out:
    diff = statistics.paired(
        (out["trained"]["accuracy"][0], out["trained"]["reps"]),
        (out["random"]["accuracy"][0], out["random"]["reps"]))
    out["delta"] = diff.to_json()
  for name in runs:
    del out[name]["reps"]
  return out


def samples(rows, examples, tok, k: int = 3) -> list[dict]:
  """The first `k` generated test bodies beside their article's real
  headline and body opening."""
  out = []
  for ex in [e for e in examples["test"] if e["label"] == 1][:k]:
    row = rows[ex["article"]]
    head = row["tokens"][row["field_ids"] == grover.HEADLINE][1:-1]
    out.append({"headline": tok.decode(head.tolist()),
                "generated": ex["inputs"][:300],
                "real": tok.decode(real_body(row))[:300]})
  return out


def table(r: dict) -> str:
  """The markdown table of a record (`bench/report.py` renders the same)."""
  f = lambda v, d=2: f"{v[0]:.{d}f} [{v[1]:.{d}f}, {v[2]:.{d}f}]"
  d = r["discriminator"]
  lines = ["| measure | value [95% interval] |", "|---|---:|"]
  for key, where in (("perplexity", "window"),
                     ("perplexity_opening", f"first {r['opening']}")):
    p = r[key]
    lines += [f"| body perplexity ({where}), after topic + headline | "
              f"{f(p['ppl_with'])} |",
              f"| body perplexity ({where}), body alone | "
              f"{f(p['ppl_without'])} |",
              f"| alone - with ({where}), nats per piece | "
              f"{f(p['nll_diff'], 3)} |",
              f"| perplexity ratio alone / with ({where}) | "
              f"{f(p['ppl_ratio'], 3)} |"]
  lines.append(f"| discriminator accuracy, % (Grover GPT-2) | "
               f"{f(d['trained']['accuracy'], 1)} |")
  if "random" in d:
    lines += [f"| discriminator accuracy, % (random init) | "
              f"{f(d['random']['accuracy'], 1)} |",
              f"| pre-trained - random, points | {f(d['delta'], 1)} |"]
  return "\n".join(lines + [f"| chance, % | {d['chance']:.1f} |"])


def measure(loaded, args) -> dict:
  """The three measurements of a loaded Grover GPT-2 on the validation
  articles, and the seconds each took."""
  length = int(loaded.run_config["seq_len"])
  if length > loaded.config.max_len:
    raise ValueError(f"seq_len {length} > the position table's "
                     f"{loaded.config.max_len}")
  articles = [a for a in sources.bbc_articles()
              if a["split"] == "validation"][:args.limit]
  rows = [grover.article_row(loaded.tokenizer, a) for a in articles]
  seconds, t0 = {}, time.time()
  ppl = perplexity(loaded, rows, length)
  cut = [opening(r, args.opening) for r in rows]
  ppl_open = perplexity(loaded, cut, max(len(r["tokens"]) for r in cut))
  seconds["perplexity"], t0 = time.time() - t0, time.time()
  examples = bodies(loaded, rows, split(len(rows), args.seed), args)
  seconds["generate"], t0 = time.time() - t0, time.time()
  disc = discriminators(loaded, examples, args)
  seconds["discriminator"] = time.time() - t0
  return dict(perplexity=ppl, opening=args.opening,
              perplexity_opening=ppl_open, discriminator=disc,
              gen_pieces=_mean_pieces(examples, 1),
              real_pieces=_mean_pieces(examples, 0),
              samples=samples(rows, examples, loaded.tokenizer),
              seconds=seconds)


def main(argv=None):
  args = parse_args(sys.argv[1:] if argv is None else argv)
  start = time.time()
  workdir = args.workdir or pretrain(args)
  train_s = time.time() - start
  loaded = loading.load(workdir)
  record = dict(workdir=workdir, step=loaded.step, run=_run_summary(loaded),
                gen_len=args.gen_len, top_p=args.top_p, top_k=args.top_k,
                disc_steps=args.disc_steps, disc_lr=args.disc_lr,
                disc_max_len=args.disc_max_len, seed=args.seed,
                machine=_common.machine(), **measure(loaded, args))
  record["seconds"].update(pretrain=train_s, total=time.time() - start)
  print(table(record), flush=True)
  _write(args.out, dict(record, bench="grover"))
  _common.emit_json("grover", record)
  ppl, disc = record["perplexity"], record["discriminator"]
  print(f"grover: body perplexity {ppl['ppl_with'][0]:.1f} with metadata, "
        f"{ppl['ppl_without'][0]:.1f} alone (ratio "
        f"{ppl['ppl_ratio'][0]:.3f}; first {args.opening} pieces "
        f"{record['perplexity_opening']['ppl_ratio'][0]:.3f}); "
        f"discriminator {disc['trained']['accuracy'][0]:.1f}% (chance "
        f"{disc['chance']:.1f}%)")


def _mean_pieces(examples, label: int) -> float:
  """Mean pieces of the bodies of one label, both halves."""
  return float(np.mean([e["pieces"] for h in examples.values() for e in h
                        if e["label"] == label]))


def _run_summary(loaded) -> dict:
  """The generator's run: steps, rows, size, params."""
  c = loaded.run_config
  return {"steps": c["steps"], "batch": c["batch_size"],
          "seq_len": c["seq_len"], "size": c.get("size"),
          "layers": loaded.config.num_layers,
          "width": loaded.config.embed_dim,
          "params": int(sum(x.size for x in jax.tree.leaves(loaded.params)))}


def _write(path: str, record: dict) -> None:
  if path:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
      json.dump(record, f, indent=1, sort_keys=True)


if __name__ == "__main__":
  main()
