"""Does an encoder-decoder's decoder read its encoder?

    python bench/encoder_use.py --workdir workdirs/demo/cells/t5_span
    python bench/encoder_use.py --toy --steps 2400 --init mesh_tf

`--workdir`: the trained scheme's decoder loss on held-out rows of its own
data (validation split, the scheme's corruption), once with the encoder
input intact and once with every row's encoder input taken from the next
row (rolled over the batch). A decoder that reads its encoder loses more
without it; equal losses mean it predicts the targets from its own prefix
alone (the span-unigram plateau of a tiny T5, README).

`--toy`: trains the tiny T5 by span corruption (dropout off, Adam at
`--lr`) on rows where each piece determines the next (a fixed random
permutation of 290 pieces), so the first piece of every span is known only
from the piece before its sentinel in the encoder input. Prints the loss
with the encoder intact and rolled every `--every` steps: the gap opens at
once when the decoder learns to find its sentinel in the encoder.
"""

import argparse
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

# pylint: disable=wrong-import-position
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

import objectives
from objectives import common
from zoo import loading
from zoo import train_lib

ROWS, LENGTH, TOY_VOCAB, CHAIN = 32, 128, 512, 290


def losses(obj, params, batch, rng) -> dict:
  """Mean decoder loss per target piece, encoder input intact and rolled."""
  inputs = obj.corrupt(common.as_batch(batch), rng)
  rolled = dict(inputs, enc={k: jnp.roll(v, 1, axis=0)
                             for k, v in inputs["enc"].items()})
  out = {}
  for name, x in (("intact", inputs), ("rolled", rolled)):
    sums = obj.score(params, x, obj.run(params, x, None, True), None,
                     True)["lm"]
    out[name] = float(sums["loss_sum"] / sums["weight_sum"])
  return out


def from_workdir(path: str, batches: int) -> dict:
  """`losses` of a trained workdir, averaged over held-out batches."""
  m = loading.load(path)
  loader = train_lib.build_loader(m.run_config, "validation", ROWS, 0)
  obj = train_lib.build_objective(m.run_config,
                                  train_lib.specials_of(m.run_config, loader),
                                  loader.tokenizer)
  if obj.interface != "encdec":
    raise ValueError(f"{path}: {obj.family} under {obj.name!r} is "
                     f"{obj.interface!r}; only an encoder-decoder has an "
                     "encoder input to roll")
  params = {"model": m.params}
  runs = [losses(obj, params, next(loader), jax.random.PRNGKey(i))
          for i in range(batches)]
  return {k: round(float(np.mean([r[k] for r in runs])), 4)
          for k in runs[0]}


def toy_batch(rng, perm) -> dict:
  """[ROWS, LENGTH] rows of the permutation chain, one document each."""
  tokens = np.zeros((ROWS, LENGTH), np.int32)
  tokens[:, 0] = rng.integers(0, CHAIN, ROWS)
  for j in range(1, LENGTH):
    tokens[:, j] = perm[tokens[:, j - 1]]
  tokens += 10  # clear of the special ids
  tokens[:, -1] = 1  # EOS
  ones = np.ones((ROWS, LENGTH), np.int32)
  words = np.broadcast_to(np.arange(1, LENGTH + 1, dtype=np.int32),
                          (ROWS, LENGTH))
  return {"tokens": tokens, "doc_ids": ones, "sentence_ids": ones,
          "word_ids": words.copy()}


def toy(steps: int, every: int, lr: float, init: str) -> None:
  """Trains the toy and prints `losses` every `every` steps."""
  obj = objectives.build(
      "t5_span", model="t5", size="tiny",
      specials=objectives.Specials(vocab_size=TOY_VOCAB),
      model_args={"init": init, "dropout_rate": 0.0})
  rng = np.random.default_rng(0)
  perm = rng.permutation(CHAIN)
  params = nn.meta.unbox(obj.init(jax.random.PRNGKey(0),
                                  toy_batch(rng, perm)))
  tx = optax.adam(lr)
  state = tx.init(params)

  @jax.jit
  def step(params, state, batch, key):
    grads = jax.grad(lambda p: obj.loss(p, batch, key)[0])(params)
    updates, state = tx.update(grads, state, params)
    return optax.apply_updates(params, updates), state

  held_out = toy_batch(np.random.default_rng(1), perm)
  for i in range(steps + 1):
    if i % every == 0:
      print(json.dumps({"step": i, **{k: round(v, 4) for k, v in losses(
          obj, params, held_out, jax.random.PRNGKey(-1)).items()}}),
            flush=True)
    if i < steps:
      params, state = step(params, state, toy_batch(rng, perm),
                           jax.random.PRNGKey(i))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--workdir", nargs="*", default=[])
  parser.add_argument("--batches", type=int, default=4)
  parser.add_argument("--toy", action="store_true")
  parser.add_argument("--steps", type=int, default=2400)
  parser.add_argument("--every", type=int, default=200)
  parser.add_argument("--lr", type=float, default=2e-3)
  parser.add_argument("--init", default="mesh_tf")
  args = parser.parse_args()
  if not args.toy and not args.workdir:
    parser.error("give --workdir PATH ... or --toy")
  for path in args.workdir:
    print(json.dumps({"workdir": path, **from_workdir(path, args.batches)}),
          flush=True)
  if args.toy:
    toy(args.steps, args.every, args.lr, args.init)


if __name__ == "__main__":
  main()
