"""Loader throughput against what a BERT-base train step consumes.

    python bench/data.py [--seq_len 128] [--batch_size 8] [--seconds 10]

Measures the pretraining loader's tokens/s on one CPU core (the sample, the
full pipeline: decode, clean, sentence split, tokenize, annotate, pack,
batch), then the tokens/s of a jitted BERT-base forward+backward step
(MLM loss) on all of this machine's cores, and prints their ratio on the last
line. The goal is a ratio of at least 20: the host must never be the
bottleneck.
"""

import argparse
import os
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

import data  # pylint: disable=g-import-not-at-top,wrong-import-position


def loader_tokens_per_s(seq_len: int, batch_size: int, seconds: float) -> float:
  """Tokens/s of `data.pretrain_loader` on the sample, pinned to one core."""
  all_cores = os.sched_getaffinity(0)
  os.sched_setaffinity(0, {min(all_cores)})
  try:
    loader = data.pretrain_loader({"source": "sample"}, seq_len=seq_len,
                                  batch_size=batch_size, seed=0)
    next(loader)  # opens the source, loads the tokenizer
    tokens, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
      tokens += next(loader)["tokens"].size
    return tokens / (time.perf_counter() - start)
  finally:
    os.sched_setaffinity(0, all_cores)


def bert_base_tokens_per_s(seq_len: int, batch_size: int,
                           steps: int) -> float | None:
  """Tokens/s of a BERT-base fwd+bwd step, or None without zoo.models.bert."""
  try:
    from zoo import models  # pylint: disable=g-import-not-at-top
    config, model = models.make("bert", "base")
  except (ImportError, ValueError) as e:
    print(f"no BERT-base to measure ({e})")
    return None
  import jax  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top
  tokens = jax.random.randint(jax.random.key(0), (batch_size, seq_len), 7,
                              config.vocab_size)
  params = jax.jit(model.init)(jax.random.key(1), tokens)

  def loss(p, t):  # MLM-shaped: logits over the whole vocabulary
    logits = model.apply(p, t)["logits"]
    return optax.softmax_cross_entropy_with_integer_labels(logits, t).mean()

  step = jax.jit(jax.value_and_grad(loss))
  jax.block_until_ready(step(params, tokens))  # compile
  start = time.perf_counter()
  for _ in range(steps):
    jax.block_until_ready(step(params, tokens))
  return steps * tokens.size / (time.perf_counter() - start)


def main(argv=None) -> None:
  """Prints both rates and, on the last line, their ratio."""
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--seq_len", type=int, default=128)
  parser.add_argument("--batch_size", type=int, default=8)
  parser.add_argument("--seconds", type=float, default=10.0)
  parser.add_argument("--steps", type=int, default=3)
  args = parser.parse_args(argv)
  load = loader_tokens_per_s(args.seq_len, args.batch_size, args.seconds)
  print(f"loader: {load:,.0f} tokens/s on one core "
        f"(batch {args.batch_size} x {args.seq_len})")
  step = bert_base_tokens_per_s(args.seq_len, args.batch_size, args.steps)
  if step is None:
    print(f"loader {load:,.0f} tokens/s; ratio unavailable")
    return
  print(f"BERT-base fwd+bwd: {step:,.0f} tokens/s on {os.cpu_count()} cores")
  print(f"loader/step ratio: {load / step:.1f}x (goal >= 20x)")


if __name__ == "__main__":
  main()
