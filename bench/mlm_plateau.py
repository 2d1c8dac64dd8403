"""Does a tiny BERT's masked LM use its context? The zoo's and the reference
implementation's, trained side by side on the same rows.

    python bench/mlm_plateau.py --steps 1500 --every 500

The demo's tiny BERT (dropout off) is built twice, by the zoo
(`zoo.models.bert`) and by transformers (`BertForMaskedLM` of the same
Config), and both are trained with Adam at `--lr` on the same packed rows
of the embedded sample (the demo's 4k tokenizer, 32 x 128), masked the same
way in numpy (15% of the real pieces: 80% [MASK], 10% a random piece, 10%
kept). Every `--every` steps each side is scored on one held-out batch of
validation rows, masked once: the loss on its [MASK] positions with the
context intact, with the rest of each row shuffled, and with every other
piece replaced by [MASK]. A model whose three losses agree predicts each
masked piece without reading its context (the unigram plateau). The last
line summarises both sides.
"""

import argparse
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

# pylint: disable=wrong-import-position
import _hf
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch

import data
from configs.compare import demo
from zoo import models

ROWS, LENGTH, RATE = 32, 128, 0.15


def masked(rng, tokens, real, specials):
  """(inputs, mask) of rows [B, T]: BERT's 80/10/10 corruption in numpy."""
  mask = (rng.random(tokens.shape) < RATE) & real
  r = rng.random(tokens.shape)
  noise = rng.integers(7, specials["vocab_size"] - specials["num_sentinels"],
                       tokens.shape)
  inputs = np.where(mask & (r < 0.8), specials["mask"], tokens)
  return np.where(mask & (r >= 0.8) & (r < 0.9), noise, inputs), mask


def views(rng, tokens, mask, mask_id):
  """Inputs of the held-out batch: context intact, shuffled, removed."""
  intact = np.where(mask, mask_id, tokens)
  shuffled = intact.copy()
  for b in range(len(shuffled)):
    keep = np.where(~mask[b])[0]
    shuffled[b, keep] = intact[b, rng.permutation(keep)]
  return {"intact": intact, "shuffled": shuffled,
          "removed": np.full_like(tokens, mask_id)}


class Zoo:
  """The zoo's BERT under Adam."""

  def __init__(self, config, lr):
    self.model = models.get("bert").Model(config)
    self.params = models.init_params("bert", config, jax.random.key(0))
    self.tx = optax.adam(lr)
    self.state = self.tx.init(self.params)
    self._step = jax.jit(self._update)
    self._nll = jax.jit(self._token_nll)

  def _token_nll(self, params, inputs, targets):
    logits = self.model.apply({"params": params}, inputs)["logits"]
    return optax.softmax_cross_entropy_with_integer_labels(logits, targets)

  def _update(self, params, state, inputs, targets, mask):
    def loss(p):
      nll = self._token_nll(p, inputs, targets)
      return jnp.sum(nll * mask) / jnp.sum(mask)
    grads = jax.grad(loss)(params)
    updates, state = self.tx.update(grads, state, params)
    return optax.apply_updates(params, updates), state

  def step(self, inputs, targets, mask):
    self.params, self.state = self._step(self.params, self.state, inputs,
                                         targets, mask.astype(np.float32))

  def loss(self, inputs, targets, mask) -> float:
    return float(np.asarray(self._nll(self.params, inputs, targets))[mask]
                 .mean())


class Reference:
  """transformers' BertForMaskedLM of the same Config under Adam."""

  def __init__(self, config, lr):
    torch.manual_seed(0)
    self.model = _hf.bert(config)
    self.opt = torch.optim.Adam(self.model.parameters(), lr=lr)

  def _nll(self, inputs, targets):
    logits = self.model(input_ids=torch.tensor(inputs, dtype=torch.long)
                        ).logits
    return torch.nn.functional.cross_entropy(
        logits.transpose(1, 2), torch.tensor(targets, dtype=torch.long),
        reduction="none")

  def step(self, inputs, targets, mask):
    weights = torch.tensor(mask, dtype=torch.float32)
    loss = (self._nll(inputs, targets) * weights).sum() / weights.sum()
    self.opt.zero_grad()
    loss.backward()
    self.opt.step()

  def loss(self, inputs, targets, mask) -> float:
    with torch.no_grad():
      return float(self._nll(inputs, targets).numpy()[mask].mean())


def rows(cfg, split, seed):
  """An endless iterator of (tokens, real) int32/bool [B, T] numpy rows."""
  for batch in data.pretrain_loader(cfg, split=split, batch_size=ROWS,
                                    seq_len=LENGTH, seed=seed):
    yield np.asarray(batch["tokens"]), np.asarray(batch["doc_ids"]) > 0


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=1500)
  parser.add_argument("--every", type=int, default=500)
  parser.add_argument("--lr", type=float, default=2e-3)
  args = parser.parse_args()
  cfg = demo.pretrain().data
  specials = data.load_tokenizer(cfg).specials()
  config = models.make_config("bert", "tiny", vocab_size=cfg.vocab_size,
                              dropout_rate=0.0, attention_dropout_rate=0.0,
                              max_len=LENGTH)
  sides = {"zoo": Zoo(config, args.lr), "transformers": Reference(
      config, args.lr)}
  rng = np.random.default_rng(0)
  held_tokens, held_real = next(rows(cfg, "validation", 0))
  held_mask = (rng.random(held_tokens.shape) < RATE) & held_real
  held = views(rng, held_tokens, held_mask, specials["mask"])
  last = {}
  train = rows(cfg, "train", 0)
  for step in range(1, args.steps + 1):
    tokens, real = next(train)
    inputs, mask = masked(rng, tokens, real, specials)
    for side in sides.values():
      side.step(inputs, tokens, mask)
    if step % args.every:
      continue
    for name, side in sides.items():
      last[name] = {v: round(side.loss(x, held_tokens, held_mask), 3)
                    for v, x in held.items()}
      print(json.dumps({"side": name, "step": step, **last[name]}),
            flush=True)
  print(" ".join(
      f"{name}: held-out masked loss {v['intact']} with the context, "
      f"{v['shuffled']} shuffled, {v['removed']} without;"
      for name, v in last.items()))


if __name__ == "__main__":
  main()
