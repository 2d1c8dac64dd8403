"""Test helpers: a tiny LM objective, its config, and a CLI driver.

`toy_lm` is an embedding, one MLP block and tied logits, predicting the
next token; params carry logical axes like the zoo's models, so the
trainer can be tested before (and apart from) the real objectives.

As a script this file is `python -m zoo.train` with `toy_lm` registered
and two extra flags for the resume tests:

    python tests/toy.py --config tests/toy.py:steps=8 --workdir DIR \\
        [--hang_after N] [--record_batches]
"""

import hashlib
import os
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections

import objectives
from configs import common

_W = nn.initializers.normal(0.5)


class ToyNet(nn.Module):
  """tokens int32 [B, T] -> logits float32 [B, T, V]."""
  vocab: int
  embed: int = 16
  mlp: int = 32
  dropout: float = 0.1

  @nn.compact
  def __call__(self, tokens, deterministic: bool = True):
    part = nn.with_logical_partitioning
    table = self.param("table", part(_W, ("vocab", "embed")),
                       (self.vocab, self.embed))
    w_in = self.param("w_in", part(_W, ("embed", "mlp")), (self.embed, self.mlp))
    b_in = self.param("b_in", part(nn.initializers.zeros, ("mlp",)), (self.mlp,))
    w_out = self.param("w_out", part(_W, ("mlp", "embed")),
                       (self.mlp, self.embed))
    # A square kernel repeats a logical name; only its first dim is sharded.
    w_sq = self.param("w_sq", part(_W, ("embed", "embed")),
                      (self.embed, self.embed))
    x = nn.with_logical_constraint(table[tokens], ("batch", "length", "embed"))
    x = x + 0.1 * jnp.einsum("btd,de->bte", x, w_sq)
    h = nn.gelu(jnp.einsum("btd,df->btf", x, w_in) + b_in)
    h = nn.Dropout(self.dropout)(h, deterministic=deterministic)
    x = x + jnp.einsum("btf,fd->btd", h, w_out)
    return jnp.einsum("btd,vd->btv", x, table)


class ToyLM(objectives.Objective):
  """Next-token loss of `ToyNet`; a token equal to `poison_id` makes it NaN."""
  name = "toy_lm"
  interface = "decoder"

  def __init__(self, model, size, specials, embed=16, mlp=32, dropout=0.1,
               poison_id=-1, model_args=None):
    del model, size, model_args
    self.net = ToyNet(specials.vocab_size, embed, mlp, dropout)
    self.poison_id = poison_id

  def init(self, rng, batch):
    return self.net.init(rng, batch["tokens"])["params"]

  def backbone(self, params):
    """The toy network is its own backbone (no zoo family)."""
    return "toy", self.net, params

  def loss(self, params, batch, rng, deterministic=False):
    tokens = batch["tokens"]
    logits = self.net.apply({"params": params}, tokens[:, :-1], deterministic,
                            rngs={"dropout": rng})
    targets = tokens[:, 1:]
    weights = (targets != 0).astype(jnp.float32)
    logp = jax.nn.log_softmax(logits.astype(jnp.float32))
    nll = -jnp.take_along_axis(logp, targets[..., None], -1)[..., 0]
    loss_sum = jnp.sum(nll * weights)
    weight_sum = jnp.sum(weights)
    correct = jnp.sum((jnp.argmax(logits, -1) == targets) * weights)
    loss = loss_sum / jnp.maximum(weight_sum, 1.0)
    loss += jnp.where(jnp.any(tokens == self.poison_id), jnp.nan, 0.0)
    return loss, {"loss_sum": loss_sum, "weight_sum": weight_sum,
                  "correct_sum": correct}


try:
  objectives.register(ToyLM)
except ValueError:
  pass  # this file was also loaded as a config module


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """A seconds-long synthetic config for `toy_lm`; `arg` is "key=value,..."."""
  c = common.base_config()
  c.model, c.objective = "toy", "toy_lm"
  c.data.source = "synthetic"
  c.data.vocab_size = 160
  c.steps, c.batch_size, c.seq_len = 8, 16, 16
  c.optimizer.lr, c.optimizer.warmup_steps = 1e-2, 2
  c.checkpoint_every, c.log_every = 4, 1
  c.eval_every, c.eval_steps = 0, 0
  return common.finish(c, arg)


def fingerprint(batch) -> str:
  """A short hash of a batch's token ids."""
  return hashlib.sha1(batch["tokens"].tobytes()).hexdigest()[:16]


class Recorder:
  """Wraps a train loader: logs each batch's fingerprint, may hang.

  Lines `<batch number> <fingerprint>` go to `path`, flushed at once, so a
  killed run leaves a faithful record of what it read.
  """

  def __init__(self, loader, path: str, hang_after: int = 0):
    self.loader, self.path, self.hang_after = loader, path, hang_after
    self.count = None

  def __iter__(self):
    return self

  def __next__(self):
    if self.count is None:
      self.count = int(self.loader.get_state().get("step", 0))
    if self.hang_after and self.count >= self.hang_after:
      time.sleep(3600)  # until the test kills this process
    batch = next(self.loader)
    self.count += 1
    rows = ",".join(f"{r}={fingerprint({'tokens': t})}" for r, t in
                    zip(self.loader.rows, batch["tokens"]))
    with open(self.path, "a", encoding="utf-8") as f:
      f.write(f"{self.count} {fingerprint(batch)} {rows}\n")
    return batch

  def get_state(self):
    return self.loader.get_state()

  def set_state(self, state):
    self.loader.set_state(state)
    self.count = None

  def restore(self, states):
    self.loader.restore(states)
    self.count = None


def record_batches(workdir: str, hang_after: int = 0) -> None:
  """Makes the trainer's train loaders `Recorder`s writing into `workdir`."""
  from zoo import train_lib  # pylint: disable=import-outside-toplevel
  build = train_lib.build_loader

  def wrapped(config, split, batch_size, seed, rows=None):
    loader = build(config, split, batch_size, seed, rows)
    if split != "train":
      return loader
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, f"batches_{jax.process_index()}.txt")
    return Recorder(loader, path, hang_after)

  train_lib.build_loader = wrapped


def _lines(workdir: str, process: int) -> list[list[str]]:
  path = os.path.join(workdir, f"batches_{process}.txt")
  with open(path, encoding="utf-8") as f:
    return [line.split() for line in f]


def read_batches(workdir: str, process: int = 0) -> list[tuple[int, str]]:
  """The `(batch number, fingerprint)` lines a recorded run wrote."""
  return [(int(n), h) for n, h, _ in _lines(workdir, process)]


def read_rows(workdir: str, processes: int = 1) -> dict[int, dict]:
  """Batch number -> {global row: fingerprint} over a run's processes."""
  out = {}
  for p in range(processes):
    for n, _, rows in _lines(workdir, p):
      out.setdefault(int(n), {}).update(
          (int(r), h) for r, h in (x.split("=") for x in rows.split(",")))
  return out


def _main():
  from absl import flags  # pylint: disable=import-outside-toplevel
  from zoo import train  # pylint: disable=import-outside-toplevel
  hang = flags.DEFINE_integer("hang_after", 0, "Hang before this batch.")
  record = flags.DEFINE_bool("record_batches", False, "Log batch hashes.")

  def main(argv):
    if record.value or hang.value:
      record_batches(flags.FLAGS.workdir, hang.value)
    train.main(argv)

  from absl import app  # pylint: disable=import-outside-toplevel
  app.run(main)


if __name__ == "__main__":
  _main()
