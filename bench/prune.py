"""Forward time of BERT with half its attention heads removed.

    python bench/prune.py [--sizes small,base] [--batch 2] [--seq_len 128]
        [--steps 5] [--remove 0.5]

For each BERT size: random params (shapes from `jax.eval_shape`, values
from numpy: nothing here depends on trained weights), head importance
(`zoo.compress.heads.head_importance`, Michel et al. 2019) from the
gradient of an MLM-style loss on one random batch, then `prune_heads`
removes `--remove` of the heads of every layer from the q/k/v and out
kernels. The jitted encoder forward (no MLM head: pruning heads does not
touch it) of the full and the pruned model is timed in alternating turns
(`_common.interleaved_medians`), with the param counts of both.

Removing half the heads halves the attention projections (4 D^2 of a
layer's 4 D^2 + 2 D F weights) and the score/value matmuls, so the ideal
time ratio at short lengths is about 1 - 0.5 * 4 D / (4 D + 2 F) = 5/6 for
F = 4 D, lower as T grows.

The last line prints each size's pruned/full time ratio.
"""

import argparse
import sys
import zlib

import jax
import jax.numpy as jnp
import numpy as np

import _common  # pylint: disable=g-bad-import-order
from zoo import models
from zoo.compress import heads


def parse_args(argv):
  """The command line."""
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--sizes", default="small,base")
  p.add_argument("--batch", type=int, default=2)
  p.add_argument("--seq_len", type=int, default=128)
  p.add_argument("--steps", type=int, default=5)
  p.add_argument("--remove", type=float, default=0.5,
                 help="fraction of each layer's heads to remove")
  args = p.parse_args(argv)
  args.sizes = [x for x in args.sizes.split(",") if x]
  return args


def random_params(model, tokens, seed: int = 0):
  """Params shaped like `model.init`'s, N(0, 1/fan_in) from numpy."""
  abstract = jax.eval_shape(model.init, jax.random.key(0), tokens)

  def fill(path, leaf):
    rng = np.random.default_rng(
        [seed, zlib.crc32(jax.tree_util.keystr(path).encode())])
    if leaf.ndim < 2:
      return np.zeros(leaf.shape, np.float32) + (
          1.0 if "scale" in jax.tree_util.keystr(path) else 0.0)
    return (leaf.shape[0] ** -0.5 * rng.standard_normal(leaf.shape)
            ).astype(np.float32)

  unboxed = jax.tree_util.tree_map(
      lambda x: x.value if hasattr(x, "value") else x, abstract["params"],
      is_leaf=lambda x: hasattr(x, "value"))
  return jax.tree_util.tree_map_with_path(fill, unboxed)


def mlm_loss(model):
  """(params, tokens [B, T]) -> mean cross-entropy of the tokens themselves."""
  def loss(p, tokens):
    logits = model.apply({"params": p}, tokens)["logits"]
    logp = jax.nn.log_softmax(logits)
    return -jnp.take_along_axis(logp, tokens[..., None], -1).mean()
  return loss


def measure(size: str, args) -> dict:
  """Times and param counts of one size, full and pruned."""
  config = models.make_config("bert", size, dropout_rate=0.0,
                              attention_dropout_rate=0.0)
  model = models.get("bert").Model(config)
  rng = np.random.default_rng(0)
  tokens = jnp.asarray(rng.integers(1, config.vocab_size,
                                    (args.batch, args.seq_len)), jnp.int32)
  params = random_params(model, tokens)
  scores = heads.head_importance(mlm_loss(model), params, [tokens])
  remove = int(round(args.remove * config.num_heads))
  small, small_config, _ = heads.prune_heads(params, config, scores, remove)

  def forward(cfg, p):
    fn = jax.jit(lambda q, t: models.get("bert").Model(cfg).apply(
        {"params": q}, t, return_logits=False)["hidden"])
    return lambda: fn(p, tokens).block_until_ready()

  times = _common.interleaved_medians(
      {"full": forward(config, params), "pruned": forward(small_config,
                                                          small)},
      args.steps, warmup=1)
  return {"heads": config.num_heads, "heads_kept": small_config.num_heads,
          "layers": config.num_layers, "embed": config.embed_dim,
          "params_full": heads.count_params(params),
          "params_pruned": heads.count_params(small),
          "seconds_full": times["full"], "seconds_pruned": times["pruned"],
          "ratio": times["pruned"] / times["full"]}


def main(argv=None):
  """Each size: a line, then the JSON record and the ratios."""
  args = parse_args(sys.argv[1:] if argv is None else argv)
  results = {}
  for size in args.sizes:
    r = results[size] = measure(size, args)
    print(f"bert-{size} B={args.batch} T={args.seq_len}: heads "
          f"{r['heads']} -> {r['heads_kept']} per layer, params "
          f"{r['params_full'] / 1e6:.2f}M -> {r['params_pruned'] / 1e6:.2f}M;"
          f" forward {r['seconds_full'] * 1e3:.1f} ms -> "
          f"{r['seconds_pruned'] * 1e3:.1f} ms", flush=True)
  _common.emit_json("prune", {
      "machine": _common.machine(), "batch": args.batch,
      "seq_len": args.seq_len, "steps": args.steps, "remove": args.remove,
      "results": results})
  print(" | ".join(f"bert-{s} pruned/full={r['ratio']:.2f}"
                   for s, r in results.items()))


if __name__ == "__main__":
  main()
