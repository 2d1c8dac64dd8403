"""An LM head and its loss chunk by chunk against the whole logits.

    python bench/head_loss.py [--model gpt2-small] [--vocabs 4000,512]
        [--chunks 0,8,16,32] [--size tiny] [--batch 32] [--seq_len 128]
        [--steps 10] [--core 0]

The one trainer's step (`_zoo.build`) of a benchmark model of
`bench/_zoo.py` (`--model`: GPT-2 under `clm`, T5 under `t5_span`, BART
is not one) at `--size`, once per value of its scheme's `head_chunk`
option: 0 takes the whole [B, T, V] logits, C > 0 runs C positions at a
time through the head with the loss's gradient formed per chunk
(`objectives.head_loss`). Vocabularies: the demo grid's (4,000 pieces)
and `bench/train_step.py --size tiny`'s (512).
Pinned to one core (`--core`, -1 = all), as a demo worker runs. The
first step of every variant starts from the same params on the same batch
and must give the same loss, to float rounding; the steps are then timed
in turns. The last line gives whole / chunked per vocabulary and chunk.
"""

import argparse
import os

import _common  # pylint: disable=g-bad-import-order
import _zoo  # pylint: disable=g-bad-import-order

import jax
import numpy as np


def variant(vocab: int, chunk: int, args):
  """(`step_fn` that runs one donated step and blocks, the first step's
  loss) of `args.model` with `head_chunk=chunk`."""
  config = _zoo.make_config(args.model, "float32", args.batch,
                            args.seq_len, args.size, vocab_size=vocab)
  config.objective_args.head_chunk = chunk
  run = _zoo.build(config)
  holder = {"state": run["state"]}

  def one():
    holder["state"], metrics = run["step"](holder["state"], run["batch"])
    return jax.block_until_ready(metrics)

  first = one()
  return one, float(first["loss_sum"]) / float(first["weight_sum"])


def measure(vocab: int, chunks: list[int], args) -> dict[str, float]:
  """Median ms per step of each chunk; raises if a first loss differs."""
  fns, losses = {}, {}
  for chunk in chunks:
    fns[str(chunk)], losses[chunk] = variant(vocab, chunk, args)
  ref = losses[chunks[0]]
  for chunk, loss in losses.items():
    if not np.isclose(loss, ref, rtol=1e-5):
      raise AssertionError(f"vocab {vocab}: head_chunk={chunk} loss {loss} "
                           f"!= {ref} (head_chunk={chunks[0]})")
  secs = _common.interleaved_medians(fns, args.steps, warmup=2)
  return {k: 1000 * v for k, v in secs.items()}


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--model", default="gpt2-small",  # mlm has no head_chunk
                 choices=[m for m in _zoo.SPECS if not m.startswith("bert")])
  p.add_argument("--vocabs", default="4000,512")
  p.add_argument("--chunks", default="0,8,16,32")
  p.add_argument("--size", default="tiny")
  p.add_argument("--batch", type=int, default=32)
  p.add_argument("--seq_len", type=int, default=128)
  p.add_argument("--steps", type=int, default=10)
  p.add_argument("--core", type=int, default=0)
  args = p.parse_args()
  if args.core >= 0:
    os.sched_setaffinity(0, {args.core})
  chunks = [int(c) for c in args.chunks.split(",")]
  if chunks[0] != 0:
    raise SystemExit("--chunks must start with 0, the whole logits")
  results, ratios = {}, {}
  for vocab in (int(v) for v in args.vocabs.split(",")):
    ms = measure(vocab, chunks, args)
    results[vocab] = ms
    for c in chunks[1:]:
      ratios[f"V{vocab}/C{c}"] = round(ms["0"] / ms[str(c)], 3)
    print(f"vocab {vocab}: " + ", ".join(
        f"head_chunk={c} {ms[str(c)]:.1f} ms" for c in chunks), flush=True)
  _common.emit_json("head_loss", {
      "machine": _common.machine(), "model": args.model,
      "objective": _zoo.objective_of(args.model), "size": args.size,
      "batch": args.batch,
      "seq_len": args.seq_len, "steps": args.steps, "core": args.core,
      "results": results, "ratios": ratios})
  print("whole / chunked:", ratios)


if __name__ == "__main__":
  main()
