"""How fast a tiny BERT learns to use the context: masked LM against causal
LM on rows where any neighbour determines a piece.

    python bench/context_toy.py --steps 1200

Rows are arithmetic runs, piece i = 7 + (a + s * i) mod 200 with random a
and s in {1, 2, 3}, fresh every step; the same tiny BERT (dropout off,
Adam at 2e-3, 32 rows of 64) trains once as a masked LM (`mlm`) and once
as a causal LM (`clm`, the encoder under a causal mask). Prints the
accuracy on the predicted pieces along the way; the last line gives the
first step at which each reaches 90%.
"""

import argparse
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

# pylint: disable=wrong-import-position
import jax
import jax.numpy as jnp
import numpy as np
import optax

import objectives
from objectives import common

ROWS, LENGTH = 32, 64


def runs(rng):
  """A batch of the contract: one document of an arithmetic run a row."""
  a, s = rng.integers(0, 200, (ROWS, 1)), rng.integers(1, 4, (ROWS, 1))
  ones = np.ones((ROWS, LENGTH), np.int32)
  return {"tokens": jnp.asarray(7 + (a + s * np.arange(LENGTH)) % 200,
                                jnp.int32),
          "doc_ids": jnp.asarray(ones), "sentence_ids": jnp.asarray(ones),
          "word_ids": jnp.asarray(np.cumsum(ones, 1), jnp.int32)}


def curve(name, steps, every):
  """`[(step, accuracy)]` of scheme `name` on a tiny BERT."""
  obj = objectives.build(name, "bert", "tiny",
                         objectives.Specials(vocab_size=512),
                         model_args={"dropout_rate": 0.0})
  rng = np.random.default_rng(0)
  params = common.nn.meta.unbox(obj.init(jax.random.key(0), runs(rng)))
  tx = optax.adam(2e-3)
  state = tx.init(params)

  @jax.jit
  def step(p, s, batch, key):
    (_, m), g = jax.value_and_grad(obj.loss, has_aux=True)(p, batch, key)
    u, s = tx.update(g, s, p)
    return optax.apply_updates(p, u), s, m["correct_sum"] / m["weight_sum"]

  out = []
  for i in range(1, steps + 1):
    params, state, acc = step(params, state, runs(rng), jax.random.key(i))
    if i % every == 0:
      out.append((i, round(float(acc), 3)))
      print(json.dumps({"scheme": name, "step": i, "accuracy": out[-1][1]}),
            flush=True)
  return out


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=1200)
  parser.add_argument("--every", type=int, default=200)
  args = parser.parse_args()
  first = {}
  for name in ("clm", "mlm"):
    hits = [s for s, a in curve(name, args.steps, args.every) if a >= 0.9]
    first[name] = hits[0] if hits else None
  print(" ".join(f"{n}: 90% at step {s}" if s else f"{n}: 90% not reached "
                 f"in {args.steps} steps" for n, s in first.items()))


if __name__ == "__main__":
  main()
