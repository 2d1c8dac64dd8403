"""Writes the README's performance section from benchmark output.

    python bench/train_step.py > /tmp/train_step.log
    python bench/attention.py > /tmp/attention.log
    python bench/report.py /tmp/train_step.log /tmp/attention.log \\
        [--readme README.md] [--block perf]

Reads the `BENCH_JSON` lines the benchmarks print (the last of each kind;
a file holding one record as a JSON object, as `bench/grover.py --out`
writes, counts as one such line) and replaces the text between
`<!-- perf:start -->` and `<!-- perf:end -->` (or another `--block`)
in the README with tables naming the machine and versions. Text outside
the markers is kept.
"""

import argparse
import json
import pathlib
import sys

import numpy as np

TAG = "BENCH_JSON"


def read_records(paths) -> list[dict]:
  """The last `BENCH_JSON` record of each benchmark run in the files.

  `train_step.py` prints a cumulative record after every model; the last
  one of a run (same first model) holds them all. Runs with different
  first models (e.g. one per model) each get a table.
  """
  records = {}
  for path in paths:
    text = pathlib.Path(path).read_text()
    lines = ([f"{TAG} {text}"] if text.lstrip().startswith("{")
             else text.splitlines())
    for line in lines:
      if line.startswith(TAG + " "):
        record = json.loads(line[len(TAG) + 1:])
        first = next(iter(record.get("results", {})), "")
        records[(record["bench"], first)] = record
  if not records:
    raise ValueError(f"no {TAG} lines in {list(map(str, paths))}")
  return list(records.values())


def machine_line(m: dict) -> str:
  """One sentence naming the machine and the versions."""
  parts = [f"{m.get('cpu', '?')} ({m.get('cores', '?')} cores, "
           f"backend {m.get('backend', '?')})",
           f"jax {m.get('jax', '?')}", f"flax {m.get('flax', '?')}"]
  if "torch" in m:
    parts += [f"torch {m['torch']}", f"transformers {m.get('transformers')}"]
  if m.get("isa"):
    parts.insert(1, "ISA " + " ".join(m["isa"]))
  load = m.get("load_avg_1m")
  if load is not None:
    end = m.get("load_avg_1m_end")
    parts.append(f"1-min load average {load}" + (
        f" at start, {end} at end" if end is not None else ""))
  return "Measured on " + ", ".join(parts) + "."


def train_step_section(r: dict) -> list[str]:
  """Markdown lines for one `train_step` record."""
  peaks = r["peaks_flops"]
  size = r.get("size")
  sized = (f"every model at the zoo's `{size}` size (the reference at the "
           f"same configuration), " if size else "")
  alloc = ("the reference with glibc's default allocator, the zoo with the "
           "one `import zoo` sets (`zoo.host_memory`); " if
           r.get("hf_host_malloc") is False else "")
  out = [f"Training step (forward, backward, AdamW), {sized}{alloc}"
         f"batch {r['batch']} x "
         f"{r['seq_len']} tokens, median of {r['steps']} timed step(s) after "
         f"warm-up; a model's runs take turns (an untimed step, then a timed "
         f"one). {machine_line(r['machine'])} Matmul peak (best of start "
         f"and end): "
         f"{peaks['float32'] / 1e9:.0f} GFLOP/s f32, "
         f"{peaks['bfloat16'] / 1e9:.0f} GFLOP/s bf16 (f32 accumulation).", "",
         "| model | run | ms/step | tokens/s | MFU | best zoo / this "
         "| at peak / this |",
         "|---|---|---:|---:|---:|---:|---:|"]
  top = max(peaks.values())
  for name, rows in r["results"].items():
    best = max(v["tokens_per_s"] for k, v in rows.items()
               if k.startswith("zoo_"))
    for key, row in rows.items():
      ceiling = row["step_s"] * top / (row["model_tflops_per_step"] * 1e12)
      label = f"{name.split('-')[0]} {size}" if size else name
      out.append(f"| {label} | {key} | {row['step_s'] * 1e3:.1f} | "
                 f"{row['tokens_per_s']:.0f} | {row['mfu']:.3f} | "
                 f"{best / row['tokens_per_s']:.2f} | {ceiling:.2f} |")
  out += ["", "The last column bounds any speed-up over that run on this "
          "machine: the ratio of a step doing the same model FLOPs (the "
          "zoo's count) at the best measured matmul peak."]
  split = sorted({k.rsplit("_x", 1)[1] for rows in r["results"].values()
                  for k in rows if "_x" in k})
  if split:
    out[-1] += (" A run named `_xN` is the zoo's step data-parallel over N "
                "CPU devices of one process (`JAX_NUM_CPU_DEVICES=N`: each "
                "device takes B/N rows; the gradient is all-reduced in "
                "memory).")
  if r.get("note"):
    out += ["", f"Note: {r['note']}."]
  return out + [""]


def attention_section(r: dict) -> list[str]:
  """Markdown lines for one `attention` record."""
  kind = "forward + backward" if r["backward"] else "forward"
  if "window" in r["results"]:
    kind += f"; the window kernel reads {r['window']} keys"
  if "lsh" in r["results"]:
    buckets = r.get("buckets") or "2T/chunk"
    kind += (f"; lsh: {r['hashes']} hash rounds, chunks of {r['chunk']} "
             f"with one chunk of look-back, {buckets} buckets")
  out = [f"Attention ({kind}, batch {r['batch']}, {r['heads']} heads of "
         f"{r['head_dim']}, {r['dtype']}), time and XLA's planned peak "
         f"memory against length T = S. {machine_line(r['machine'])}", "",
         "| kernel | T | ms | MiB |", "|---|---:|---:|---:|"]
  for impl, rows in r["results"].items():
    for t, row in sorted(rows.items(), key=lambda kv: int(kv[0])):
      out.append(f"| {impl} | {t} | {row['seconds'] * 1e3:.1f} | "
                 f"{row['peak_bytes'] / 2**20:.1f} |")
  slopes = ", ".join(f"{impl}: time {s['time']:.2f}, memory {s['mem']:.2f}"
                     for impl, s in r["slopes"].items())
  return out + ["", f"Log-log slopes in T: {slopes}.", ""]


def depth_section(r: dict) -> list[str]:
  """Markdown lines for one `depth` record."""
  out = [f"Gradient of a Reformer LM step (size small, batch {r['batch']} x "
         f"{r['seq_len']} tokens, layers scanned), XLA's planned memory "
         f"against depth. {machine_line(r['machine'])}", "",
         "| layers | L | temporaries MiB | total MiB |",
         "|---|---:|---:|---:|"]
  for kind, rows in r["results"].items():
    for depth, row in sorted(rows.items(), key=lambda kv: int(kv[0])):
      out.append(f"| {kind} | {depth} | {row['temp_bytes'] / 2**20:.1f} | "
                 f"{row['total_bytes'] / 2**20:.1f} |")
  slopes = ", ".join(f"{kind}: temporaries {s['temp']:.2f}, total "
                     f"{s['total']:.2f}" for kind, s in r["slopes"].items())
  return out + ["", f"Log-log slopes in L: {slopes}.", ""]


def prune_section(r: dict) -> list[str]:
  """Markdown lines for one `prune` record."""
  out = [f"BERT encoder forward (batch {r['batch']} x {r['seq_len']} "
         f"tokens, random weights, float32), all heads against "
         f"{r['remove']:.0%} of each layer's heads removed by importance. "
         f"{machine_line(r['machine'])}", "",
         "| size | heads | params | ms | pruned heads | params | ms | "
         "pruned / full |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
  for size, x in r["results"].items():
    out.append(f"| bert-{size} | {x['heads']} | "
               f"{x['params_full'] / 1e6:.2f}M | "
               f"{x['seconds_full'] * 1e3:.1f} | {x['heads_kept']} | "
               f"{x['params_pruned'] / 1e6:.2f}M | "
               f"{x['seconds_pruned'] * 1e3:.1f} | {x['ratio']:.2f} |")
  return out + [""]


def quant_section(r: dict) -> list[str]:
  """Markdown lines for one `quant` record."""
  t, acc = r["seconds"], r["accuracy"]
  dots = ", ".join(f"{n} {k}" for k, n in sorted(r["dots"].items()))
  out = [f"BERT-{r['size']} encoder forward (batch {r['batch']} x "
         f"{r['length']} tokens, random weights), float32 against the int8 "
         f"path; the int8 program's dots by result type: {dots}. "
         f"{machine_line(r['machine'])}", "",
         "| path | ms | max abs logit diff vs float32 | argmax agreement |",
         "|---|---:|---:|---:|",
         f"| float32 | {t['float32'] * 1e3:.1f} | - | - |"]
  for name, key in (("fake-quantised", "fake_vs_float32"),
                    ("int8", "int8_vs_float32")):
    ms = f"{t['int8'] * 1e3:.1f}" if name == "int8" else "-"
    out.append(f"| {name} | {ms} | {acc[key]['max_abs_diff']:.4f} | "
               f"{acc[key]['argmax_agree']:.1%} |")
  return out + ["", f"float32 / int8 time: {t['float32'] / t['int8']:.2f}.",
                ""]


def static_section(r: dict) -> list[str]:
  """Markdown lines for one `static_vs_gensim` record."""
  runs = r["runs"]
  seeds = len({x["seed"] for x in runs})
  out = [f"Static embeddings, {r['size']} size, {r['passes']} passes over "
         f"the sample's {r['pieces'] / 1e6:.2f}M training pieces, "
         f"{seeds} seeds each" + (
             f" (the zoo: {r['steps']} steps of {r['batch']} rows x 128)"
             if "batch" in r else "") + ". Word classes: percent of the "
         f"{r['triples']} Brown word-class triples passed (50 = chance); "
         "probe: the demo's probe view, average of its three tasks. Mean "
         f"over seeds [min, max]. {machine_line(r['machine'])}", "",
         "| scheme | implementation | word classes | probe |",
         "|---|---|---:|---:|"]
  for scheme in dict.fromkeys(x["scheme"] for x in runs):
    for impl in ("zoo", "gensim"):
      got = [x for x in runs if x["scheme"] == scheme and x["impl"] == impl]
      cells = []
      for key in ("word_classes", "probe"):
        v = [x[key] for x in got]
        cells.append(f"{sum(v) / len(v):.1f} [{min(v):.1f}, {max(v):.1f}]")
      out.append(f"| {scheme} | {impl} | {cells[0]} | {cells[1]} |")
  gaps = static_gaps(runs)
  if gaps:
    out += ["", "Zoo minus gensim (mean over seeds), beside the run-to-run "
            "spread (the larger of the two implementations' max - min over "
            "seeds):", "", "| scheme | word classes | spread | probe | "
            "spread |", "|---|---:|---:|---:|---:|"]
    for scheme, (wc, pr) in gaps.items():
      out.append(f"| {scheme} | {wc[0]:+.1f} | {wc[1]:.1f} | {pr[0]:+.1f} "
                 f"| {pr[1]:.1f} |")
  return out + [""]


def static_gaps(runs) -> dict:
  """scheme -> ((zoo - gensim, spread) of word classes, of the probe), for
  the schemes both implementations ran; spread: the larger of the two
  implementations' max - min over seeds."""
  out = {}
  for scheme in dict.fromkeys(x["scheme"] for x in runs):
    pairs = []
    for key in ("word_classes", "probe"):
      got = {impl: [x[key] for x in runs if x["scheme"] == scheme
                    and x["impl"] == impl] for impl in ("zoo", "gensim")}
      if not all(got.values()):
        break
      pairs.append((np.mean(got["zoo"]) - np.mean(got["gensim"]),
                    max(np.ptp(v) for v in got.values())))
    else:
      out[scheme] = tuple(pairs)
  return out


def _ci(v) -> str:
  """"point [low, high]" of a [point, low, high] triple."""
  return f"{v[0]:.1f} [{v[1]:.1f}, {v[2]:.1f}]"


KNOWLEDGE_HEADS = {"mlm": "MLM: pieces", "dea": "dEA: entities",
                   "transe": "TransE: e_h + w_r"}


def knowledge_probe_section(r: dict) -> list[str]:
  """Markdown lines for one `knowledge_probe` record."""
  rows = r["rows"]
  kinds = {("pieces" if x.get("head", "mlm") == "mlm" else "entities"):
           x["candidates"] for x in rows}
  ranked = "; ".join(f"{k} among {n}" for k, n in sorted(kinds.items(),
                                                          reverse=True))
  split = {"held_out": "held-out", "seen": "seen (TransE trained on)"}[
      r.get("split", "held_out")]
  out = [f"WordNet hypernym cloze, {rows[0]['facts']} {split} facts, "
         f"answers ranked among the probe's answers ({ranked}); x 100, "
         "point [95% bootstrap interval over facts]; Δ: paired difference "
         "to the same model at random init (TransE's: to a random "
         f"ranking). {machine_line(r['machine'])}",
         "", "| workdir | family | head | P@1 | random | Δ | MRR | random "
         "| Δ |", "|---|---|---|---:|---:|---:|---:|---:|---:|"]
  for row in rows:
    cells = []
    for metric in ("p_at_1", "mrr"):
      m = row[metric]
      star = "*" if m["delta"][1] > 0 or m["delta"][2] < 0 else ""
      cells += [_ci(m["trained"]), _ci(m["random"]),
                f"{m['delta'][0]:+.1f} [{m['delta'][1]:+.1f}, "
                f"{m['delta'][2]:+.1f}]{star}"]
    head = KNOWLEDGE_HEADS[row.get("head", "mlm")]
    out.append(f"| {row['workdir']} | {row['family']} | {head} | "
               + " | ".join(cells) + " |")
  return out + [""]


def pals_section(r: dict) -> list[str]:
  """Markdown lines for one `pals` record."""
  runs, tasks = r["runs"], r["tasks"]
  seeds = len({x["seed"] for x in runs})
  out = [f"{len(tasks)} tasks on one {r['family']} ({r['backbone']}), "
         f"{r['steps']} steps of 16 rows x {r['max_len']} per task (the "
         f"multi-task rows {r['steps']} x {len(tasks)} in all), lr "
         f"{r['lr']} (adapters {r.get('adapter_lr', r['lr'])}), PALs of "
         f"width {r['pal_dim']}, adapters of {r['adapter_dim']}; all "
         "tasks: the params serving every task, a shared encoder counted "
         "once. Validation score (accuracy; F1 for "
         f"sms_spam), mean over {seeds} seeds [min, max]. "
         f"{machine_line(r['machine'])}", "",
         "| row | params per task | all tasks | " + " | ".join(tasks)
         + " | mean |", "|---|---:|---:|" + "---:|" * (len(tasks) + 1)]
  for row in dict.fromkeys(x["row"] for x in runs):
    got = [x for x in runs if x["row"] == row]
    per_task = np.mean([got[0]["added"][t] for t in tasks])
    total = got[0]["shared"] + sum(got[0]["added"][t] for t in tasks)
    cells = []
    for t in tasks + ["mean"]:
      v = [np.mean([x["scores"][n] for n in tasks]) if t == "mean"
           else x["scores"][t] for x in got]
      cells.append(f"{np.mean(v):.1f} [{min(v):.1f}, {max(v):.1f}]")
    out.append(f"| {row} | {per_task / 1e3:.1f}k | {total / 1e6:.2f}M | "
               + " | ".join(cells) + " |")
  return out + [""]


def _grover_perplexity(p: dict, where: str) -> list[str]:
  """Table rows of one perplexity comparison of a `grover` record."""
  ci = lambda v, k=1: f"{v[0]:.{k}f} [{v[1]:.{k}f}, {v[2]:.{k}f}]"
  return [f"| body perplexity ({where}), after topic + headline | "
          f"{ci(p['ppl_with'])} |",
          f"| body perplexity ({where}), body alone | "
          f"{ci(p['ppl_without'])} |",
          f"| alone - with ({where}), nats per piece | "
          f"{p['nll_diff'][0]:+.3f} [{p['nll_diff'][1]:+.3f}, "
          f"{p['nll_diff'][2]:+.3f}] |",
          f"| perplexity ratio alone / with ({where}) | "
          f"{ci(p['ppl_ratio'], 3)} |"]


def grover_section(r: dict) -> list[str]:
  """Markdown lines for one `grover` record."""
  p, d, run = r["perplexity"], r["discriminator"], r["run"]
  ci = lambda v: f"{v[0]:.1f} [{v[1]:.1f}, {v[2]:.1f}]"
  sampling = ", ".join(([f"top-k {r['top_k']}"] if r["top_k"] else [])
                       + ([f"top-p {r['top_p']}"] if r["top_p"] < 1 else []))
  out = [f"Grover GPT-2 ({run['layers']} layers of {run['width']}, "
         f"{run['params'] / 1e6:.1f}M params) pre-trained {run['steps']} "
         f"steps of {run['batch']} x {run['seq_len']} article pieces. "
         f"Body perplexity of the {p['articles']} validation articles, the "
         f"same body pieces scored in both layouts: window, those in each "
         f"article's first {run['seq_len']} pieces ({p['pieces']:.0f} in "
         "all); opening, each body's first "
         f"{r.get('opening', '?')}; exp of the mean over articles of nats "
         "per piece. Discriminator: the backbone with a concat-pooling head "
         f"fine-tuned {r['disc_steps']} steps on {d['train']} bodies, tested "
         f"on {d['test']} of other articles (generated: "
         f"{sampling or 'sampled'}, {r['gen_pieces']:.0f} pieces on "
         "average, real ones cut to match). Point [95% bootstrap interval "
         f"over articles]. {machine_line(r['machine'])}", "",
         "| measure | value |", "|---|---:|"]
  out += _grover_perplexity(p, "window")
  if "perplexity_opening" in r:
    out += _grover_perplexity(r["perplexity_opening"], "opening")
  out.append(f"| discriminator accuracy, % | {ci(d['trained']['accuracy'])} |")
  if "random" in d:
    out += [f"| same, random-init backbone, % | "
            f"{ci(d['random']['accuracy'])} |",
            f"| pre-trained - random, points | {d['delta'][0]:+.1f} "
            f"[{d['delta'][1]:+.1f}, {d['delta'][2]:+.1f}] |"]
  t = r["seconds"]
  return out + [f"| chance, % | {d['chance']:.1f} |", "",
                f"The run took {t['total'] / 60:.0f} min (pre-training "
                f"{t.get('pretrain', 0) / 60:.0f} min).", ""]


def speech_section(r: dict) -> list[str]:
  """Markdown lines for one `speech` record."""
  rows = r["rows"]
  views = list(rows["pre-trained"])
  took = (f"in {r['pretrain_seconds']:.0f} s" if r["pretrain_seconds"]
          is not None else "(trained before the probes' run)")
  out = [f"Mockingjay pre-trained by `mam` ({r['config']}): {r['steps']} "
         f"steps {took}, final training L1 "
         f"{r['final_loss']}. Frame-level linear probes (`zoo.harness."
         f"speech_probe`) fitted on the steps of {r['train_utterances']} "
         "training utterances, accuracy (%) on every step of the validation "
         "utterances, point [95% bootstrap interval over utterances]; Δ: "
         "paired difference from random init, * where it excludes zero; "
         "`_last`: the last layer alone, else the scalar mix of all layers. "
         f"{machine_line(r['machine'])}", "",
         "| row | " + " | ".join(f"{v} | Δ" for v in views) + " |",
         "|---|" + "---:|---:|" * len(views)]
  for name, row in rows.items():
    cells = []
    for v in views:
      if v not in row:
        cells += ["", ""]
        continue
      d = row[v]["delta"]
      star = "*" if d and (d[1] > 0 or d[2] < 0) else ""
      cells += [_ci(row[v]["accuracy"]),
                f"{d[0]:+.1f} [{d[1]:+.1f}, {d[2]:+.1f}]{star}" if d else ""]
    out.append(f"| {name} | " + " | ".join(cells) + " |")
  return out + [""]


def few_shot_speed_section(r: dict) -> list[str]:
  """Markdown lines for one `few_shot_speed` record."""
  out = [f"Every few-shot run of the demo's recipe ({r['runs']} per row: "
         "tasks x seeds), pinned to one core as a demo worker runs: "
         "`zoo.finetune` (the steps scanned in one program, an "
         "encoder-decoder's inputs encoded once for every label, a "
         "decoder's prompt read once with every label after it) against "
         "a loop of single jitted steps and a forward pass per label, "
         f"in turns (median of {r['turns']} timed turns each), with the "
         f"same predictions and losses. {machine_line(r['machine'])}", "",
         "| row | reference s | zoo s | reference / zoo |",
         "|---|---:|---:|---:|"]
  for row, x in r["results"].items():
    out.append(f"| {row} | {x['reference']:.1f} | {x['zoo']:.1f} | "
               f"{x['ratio']:.2f} |")
  return out + [""]


def head_loss_section(r: dict) -> list[str]:
  """Markdown lines for one `head_loss` record."""
  where = ("pinned to one core as a demo worker runs" if r["core"] >= 0
           else "on every core")
  name = {"gpt2": "GPT-2", "t5": "T5"}[r["model"].split("-")[0]]
  out = [f"The one trainer's step of {name} {r['size']} under "
         f"`{r['objective']}`, batch "
         f"{r['batch']} x {r['seq_len']} tokens, {where}: `head_chunk` = 0 "
         "takes the whole [B, T, V] logits, C > 0 runs C positions at a "
         "time through the head with the loss's gradient formed per chunk "
         "(`objectives.head_loss`); the same first loss, then median of "
         f"{r['steps']} timed steps each, in turns. "
         f"{machine_line(r['machine'])}", "",
         "| vocabulary | head_chunk | ms/step | whole / this |",
         "|---:|---:|---:|---:|"]
  for vocab, ms in sorted(r["results"].items(), key=lambda kv: int(kv[0]),
                          reverse=True):
    for chunk, t in sorted(ms.items(), key=lambda kv: int(kv[0])):
      out.append(f"| {int(vocab):,} | {chunk} | {t:.1f} | "
                 f"{ms['0'] / t:.2f} |")
  return out + [""]


_SECTIONS = {"train_step": train_step_section,
             "attention": attention_section, "depth": depth_section,
             "prune": prune_section, "quant": quant_section,
             "static_vs_gensim": static_section,
             "knowledge_probe": knowledge_probe_section,
             "pals": pals_section, "grover": grover_section,
             "speech": speech_section,
             "few_shot_speed": few_shot_speed_section,
             "head_loss": head_loss_section}


def section(records: list[dict]) -> str:
  """The markdown between the markers for these records."""
  benches = sorted({r["bench"] for r in records}, reverse=True)
  lines = ["Generated by `bench/report.py` from the output of "
           + " and ".join(f"`bench/{b}.py`" for b in benches) + ".", ""]
  for r in records:
    if r["bench"] not in _SECTIONS:
      raise ValueError(f"unknown benchmark record {r['bench']!r}")
    lines += _SECTIONS[r["bench"]](r)
  return "\n".join(lines).rstrip() + "\n"


def replace_section(text: str, body: str, block: str = "perf") -> str:
  """`text` with the body between the `<!-- block:start/end -->` markers
  replaced."""
  start, end = f"<!-- {block}:start -->", f"<!-- {block}:end -->"
  if text.count(start) != 1 or text.count(end) != 1:
    raise ValueError(f"the README needs exactly one {start} and one {end}")
  head, rest = text.split(start)
  _, tail = rest.split(end)
  return f"{head}{start}\n{body}{end}{tail}"


def main(argv=None):
  """Reads the logs and rewrites the README section in place."""
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("logs", nargs="+")
  p.add_argument("--readme", default=str(
      pathlib.Path(__file__).resolve().parent.parent / "README.md"))
  p.add_argument("--block", default="perf",
                 help="the README block to rewrite (<!-- NAME:start -->)")
  args = p.parse_args(sys.argv[1:] if argv is None else argv)
  readme = pathlib.Path(args.readme)
  readme.write_text(replace_section(readme.read_text(),
                                    section(read_records(args.logs)),
                                    args.block))
  print(f"wrote the {args.block} section of {readme}")


if __name__ == "__main__":
  main()
