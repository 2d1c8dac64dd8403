"""Does a segment memory lower held-out perplexity at equal segment length?

    python bench/long_context.py [--segment 64] [--passes 1.5] [--workdir DIR]

Trains two causal LMs of one size on the embedded sample, reading the same
rows with the demo's recipe (`configs/compare/demo.py`: 4k-piece tokenizer,
32 rows, the same optimizer) for `--passes` passes:

  transfo_xl: a Transformer-XL whose train state carries each row's memory
    of `--segment` tokens from step to step (`clm` with `memory=True`,
    `mem_len` = the segment; Dai et al. 2019, section 3.2);
  gpt2: a GPT-2 of the same depth and width, reading each segment alone.

Then reads the validation split with `zoo.train.evaluate`, segment by
segment, each row going on where it stopped: the Transformer-XL with a
memory of 0, 1 and 2 times the segment (the memory starts empty and, as in
training, a query reads only its own document's memory), and the GPT-2.
Every reading scores the same targets. One JSON line per reading; the last
line holds the perplexity ratios. The Transformer-XL paper's claim is that
memory lowers perplexity at equal segment length: a ratio below 1 on the
last line says it does here.
"""

import argparse
import json
import math
import os
import pathlib
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

# pylint: disable=wrong-import-position
import ml_collections

import data
from configs.compare import demo
from zoo import compile_cache
from zoo import train
from zoo.harness import cells as cells_lib


def _config(args, model: str, steps: int) -> ml_collections.ConfigDict:
  """The demo's pre-training recipe for `model` on segments of the bench."""
  c = demo.pretrain()
  c.model, c.objective, c.steps = model, "clm", steps
  c.seq_len = args.segment
  c.optimizer.warmup_steps = max(1, steps // 10)
  c.optimizer.decay_steps = -1
  c.checkpoint_every = steps
  c.log_every = max(1, steps // 20)
  shared = dict(num_layers=args.layers, embed_dim=args.dim,
                num_heads=args.heads, mlp_dim=4 * args.dim)
  if model == "transfo_xl":
    c.objective_args = ml_collections.ConfigDict(dict(memory=True))
    shared.update(head_dim=args.dim // args.heads, mem_len=args.segment)
  else:
    shared.update(max_len=args.segment)
  c.model_args = ml_collections.ConfigDict(shared)
  return c


def _steps(args) -> int:
  """Steps of `--passes` passes over the sample's training split."""
  if args.steps:
    return args.steps
  grid = demo.grid([("clm", "clm", "gpt2", "")], budget=1)
  corpus = cells_lib.corpus_tokens(grid,
                                   data.load_tokenizer(grid.pretrain.data))
  return max(1, math.ceil(args.passes * corpus /
                          (demo.BATCH * args.segment)))


def _read(name: str, memory: int, config, workdir: str,
          batches: int | None) -> dict:
  """One reading of the validation split, as a JSON-able dict."""
  metrics = train.evaluate(config, workdir, batches=batches)
  row = {"model": name, "memory": memory, "loss": round(metrics["loss"], 4),
         "perplexity": round(math.exp(metrics["loss"]), 3),
         "targets": int(metrics["weight_sum"])}
  print(json.dumps(row), flush=True)
  return row


def _readings(args, configs: dict, root: str) -> list[dict]:
  """The Transformer-XL at memory 0, 1x and 2x the segment; the GPT-2."""
  rows = []
  for scale in (0, 1, 2):
    c = ml_collections.ConfigDict(configs["transfo_xl"].to_dict())
    c.objective_args.memory = scale > 0
    c.model_args.mem_len = max(1, scale) * args.segment
    rows.append(_read("transfo_xl", scale * args.segment, c,
                      os.path.join(root, "transfo_xl"), args.batches))
  rows.append(_read("gpt2", 0, configs["gpt2"], os.path.join(root, "gpt2"),
                    args.batches))
  return rows


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--segment", type=int, default=64,
                      help="tokens per row: the segment length")
  parser.add_argument("--passes", type=float, default=1.5)
  parser.add_argument("--steps", type=int, default=0,
                      help="train steps (default: from --passes)")
  parser.add_argument("--layers", type=int, default=4)
  parser.add_argument("--dim", type=int, default=128)
  parser.add_argument("--heads", type=int, default=4)
  parser.add_argument("--batches", type=int, default=None,
                      help="validation batches per reading (default: all)")
  parser.add_argument("--workdir", default=None)
  args = parser.parse_args()
  compile_cache.enable()
  root = args.workdir or tempfile.mkdtemp(prefix="long_context_")
  steps = _steps(args)
  configs = {m: _config(args, m, steps) for m in ("transfo_xl", "gpt2")}
  for model, config in configs.items():
    final = train.train(config, os.path.join(root, model))
    print(json.dumps({"model": model, "steps": steps,
                      "train_loss": round(final["loss"], 4)}), flush=True)
  rows = _readings(args, configs, root)
  if len({r["targets"] for r in rows}) != 1:
    raise SystemExit(f"the readings scored different targets: {rows}")
  ppl = [r["perplexity"] for r in rows]
  print(f"segment {args.segment}, {steps} steps: perplexity ratio "
        f"transfo_xl memory {args.segment}/none {ppl[1] / ppl[0]:.3f}, "
        f"memory {2 * args.segment}/none {ppl[2] / ppl[0]:.3f}; "
        f"transfo_xl/gpt2 without memory {ppl[0] / ppl[3]:.3f}, with "
        f"memory {args.segment} {ppl[1] / ppl[3]:.3f}")


if __name__ == "__main__":
  main()
