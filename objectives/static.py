"""word2vec's schemes on the packed rows: `skipgram` and `cbow`.

Mikolov et al. 2013, negative sampling, for the `word2vec` and `fasttext`
families (`zoo.models.static`). Everything happens
inside jit from the step's rng, on the same rows every scheme reads:

1. Subsampling: each ordinary piece w is kept with probability p(w), from
   its count c(w) among N training pieces and the threshold `sample` = t.
   `subsample="release"` (default) is word2vec.c's and gensim's
   p = (sqrt(c / (t N)) + 1) t N / c; `"paper"` is the paper's
   p = sqrt(t N / c) (discarded with 1 - sqrt(t / f)). Both capped at 1.
2. The kept pieces of a row close up, as word2vec deletes discarded words
   before it windows a sentence (`compact`).
3. Windows: each centre t draws b_t uniformly from 1..`window` and pairs
   with the kept pieces at most b_t away in its own sentence
   (`sentence_ids`; packed documents never meet).
4. Loss: skip-gram predicts each context piece c from the centre w,
   -log s(u_c . v_w) - sum_k log s(-u_k . v_w); CBOW predicts the centre
   from the mean of its context's input vectors. The K = `negatives`
   noise pieces are drawn from counts^`noise_power` (0.75); a draw equal
   to the piece it stands against is skipped, as word2vec does.

v are input vectors (`Model.vectors`, FastText's include n-grams), u rows
of the output table. Counts arrive as the option `counts` ([V] ints;
`zoo.train` passes `data.counts.piece_counts` of the run's corpus), and a
FastText model's n-gram ids as `ngram_table` (`static.ngram_table`);
either may be a callable, called once when first needed (loading a
workdir never reads the corpus). `backbone` gives a FastText model as the
word2vec table of its pieces' vectors (`static.fold`).

Letters: B batch, T length, D embed, C context slots (2 * window), K noise.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from objectives import common
from objectives import register
from zoo import models
from zoo.models import static as static_lib

SUBSAMPLING = ("release", "paper")
REDUCTIONS = ("mean", "sum")
_MISSING = {
    "counts": ("objective {!r} needs the corpus's piece counts "
               "(counts=data.counts.piece_counts(data_config, tokenizer))"),
    "ngram_table": ("a FastText model under {!r} needs ngram_table="
                    "zoo.models.static.ngram_table(tokenizer.pieces(), "
                    "config)"),
}


def keep_probability(counts: np.ndarray, sample: float, rule: str
                     ) -> np.ndarray:
  """p(keep) per piece, float32 [V]; 1 where `sample` is 0 or unseen."""
  if rule not in SUBSAMPLING:
    raise ValueError(f"subsample {rule!r} is not one of {SUBSAMPLING}")
  c = np.asarray(counts, np.float64)
  if sample <= 0 or c.sum() <= 0:
    return np.ones(c.shape, np.float32)
  t = sample * c.sum()
  with np.errstate(divide="ignore", invalid="ignore"):
    p = (np.sqrt(c / t) + 1) * t / c if rule == "release" else np.sqrt(t / c)
  return np.where(c > 0, np.minimum(p, 1.0), 1.0).astype(np.float32)


def noise_cdf(counts: np.ndarray, power: float, first: int, last: int
              ) -> np.ndarray:
  """The noise distribution's cumulative sums, float32 [V]: weights
  c^power over the ordinary pieces first..last that occur, 0 elsewhere."""
  c = np.asarray(counts, np.float64)
  ids = np.arange(c.shape[0])
  w = np.where((c > 0) & (ids >= first) & (ids <= last), c ** power, 0.0)
  if w.sum() <= 0:
    raise ValueError("the piece counts hold no ordinary piece")
  return (np.cumsum(w) / w.sum()).astype(np.float32)


def sample_noise(rng, cdf: np.ndarray, shape: tuple[int, ...]):
  """Draws from the distribution with cumulative sums `cdf` [V] (inverse
  transform, as word2vec's unigram table; no [..., V] array is built).

  Returns:
    int32 ids of `shape`.
  """
  cdf = jnp.asarray(cdf)
  u = jax.random.uniform(rng, shape, maxval=cdf[-1])
  ids = jnp.searchsorted(cdf, u.reshape(-1), side="right")
  return jnp.minimum(ids, cdf.shape[0] - 1).reshape(shape).astype(jnp.int32)


def compact(keep, *arrays):
  """Each row's kept positions first, in order: keep [B,T] bool and
  arrays [B,T,...] -> (keep, *arrays) gathered; moved-up slots are False."""
  order = jnp.argsort(~keep, axis=1, stable=True)
  take = lambda x: jnp.take_along_axis(
      x, order.reshape(order.shape + (1,) * (x.ndim - 2)), axis=1)
  return tuple(take(x) for x in (keep, *arrays))


def shift(x, offset: int):
  """x[:, t + offset] at t, zeros past either end; x [B,T,...]."""
  t = x.shape[1]
  if abs(offset) >= t:
    return jnp.zeros_like(x)
  pad = jnp.zeros_like(x[:, :abs(offset)])
  if offset > 0:
    return jnp.concatenate([x[:, offset:], pad], 1)
  return jnp.concatenate([pad, x[:, :t + offset]], 1)


def offsets(window: int) -> tuple[int, ...]:
  """The C = 2 * window context offsets: -window..-1, 1..window."""
  return tuple(range(-window, 0)) + tuple(range(1, window + 1))


def contexts(tokens, sentence_ids, reach, window: int):
  """Context pieces of every position and which of them count.

  Args:
    tokens, sentence_ids: [B,T] int32 compacted rows (0: dropped or pad).
    reach: [B,T] int32 b_t, the centre's window.
    window: the largest window.

  Returns:
    ([B,T,C] int32 context ids, [B,T,C] bool valid).
  """
  ids, valid = [], []
  for o in offsets(window):
    seg = shift(sentence_ids, o)
    ids.append(shift(tokens, o))
    valid.append((sentence_ids > 0) & (seg == sentence_ids)
                 & (abs(o) <= reach))
  return jnp.stack(ids, -1), jnp.stack(valid, -1)


def negative_sums(center, positive, noise_vectors, valid, clash):
  """Negative-sampling sums.

  Args:
    center: [..., D] the vector that predicts.
    positive: [..., D] the output vector of the true piece.
    noise_vectors: [..., K, D] output vectors of the noise pieces.
    valid: [...] bool, the pairs that count.
    clash: [..., K] bool, noise draws equal to the true piece (skipped).

  Returns:
    dict of float32 scalars `loss_sum`, `weight_sum`, `correct_sum` (a hit:
    the true piece scores above 0 and every noise piece below).
  """
  pos = jnp.einsum("...d,...d->...", center, positive)
  neg = jnp.einsum("...d,...kd->...k", center, noise_vectors)
  nll = -jax.nn.log_sigmoid(pos) - jnp.where(
      clash, 0.0, jax.nn.log_sigmoid(-neg)).sum(-1)
  hit = (pos > 0) & jnp.all((neg < 0) | clash, -1)
  w = valid.astype(jnp.float32)
  return {"loss_sum": (nll * w).sum(), "weight_sum": w.sum(),
          "correct_sum": (hit * w).sum()}


class _Word2Vec(common.Scheme):
  """What skip-gram and CBOW share: subsampling, windows, noise."""
  interfaces = ("encoder",)
  defaults = {"window": 5, "negatives": 5, "sample": 1e-3,
              "subsample": "release", "noise_power": 0.75, "counts": None,
              "ngram_table": None, "reduction": "mean"}

  def setup(self):
    if models.get(self.family) is not static_lib:
      raise ValueError(f"objective {self.name!r} trains word2vec or "
                       f"fasttext tables, not {self.family!r}")
    self._tables = {}
    if self.options["reduction"] not in REDUCTIONS:
      raise ValueError(f"reduction {self.options['reduction']!r} is not "
                       f"one of {REDUCTIONS}")

  def _table(self, name: str) -> np.ndarray:
    """Option `name` (`counts`, `ngram_table`; an array, or a callable
    that returns one, called once when first needed)."""
    if name not in self._tables:
      value = self.options[name]
      value = value() if callable(value) else value
      if value is None:
        raise ValueError(_MISSING[name].format(self.name))
      self._tables[name] = np.asarray(value)
    return self._tables[name]

  def sampling(self) -> tuple[np.ndarray, np.ndarray]:
    """(keep probability [V], noise cdf [V]) from the piece counts."""
    counts = self._table("counts")
    if counts.shape != (self.config.vocab_size,):
      raise ValueError(f"counts {counts.shape} do not cover the "
                       f"{self.config.vocab_size} pieces of the model")
    o = self.options
    return (keep_probability(counts, o["sample"], o["subsample"]),
            noise_cdf(counts, o["noise_power"], self.specials.first_regular,
                      self.specials.last_regular))

  def ngrams(self, tokens):
    """FastText's n-gram ids of tokens [B,T] -> [B,T,G]; None for word2vec."""
    if self.config.ngram_buckets <= 0:
      return None
    return jnp.take(jnp.asarray(self.ngram_table(), jnp.int32), tokens,
                    axis=0)

  def ngram_table(self) -> np.ndarray:
    """int32 [V, G]: every piece's n-gram ids (option `ngram_table`)."""
    table = self._table("ngram_table")
    if table.ndim != 2 or table.shape[0] != self.config.vocab_size:
      raise ValueError(f"ngram_table {table.shape} does not hold a row for "
                       f"each of the model's {self.config.vocab_size} "
                       "pieces")
    return table

  def loss(self, params, batch, rng, deterministic=False):
    """The pairs' mean loss, or with `reduction="sum"` their sum (metrics
    unchanged), so that SGD's rate is word2vec's rate per pair."""
    loss, metrics = super().loss(params, batch, rng, deterministic)
    if self.options["reduction"] == "sum":
      loss = loss * jax.lax.stop_gradient(metrics["weight_sum"])
    return loss, metrics

  def init(self, rng, batch):
    """Boxed params `{"model": tables}`; making them reads no counts."""
    tokens = common.as_batch(batch)["tokens"]
    return {"model": self.model.init({"params": rng}, tokens)["params"]}

  def backbone(self, params):
    """word2vec: the model; FastText: folded into word2vec (`static.fold`)."""
    family, config, params = super().backbone(params)
    if config.ngram_buckets <= 0:
      return family, config, params
    table = self.ngram_table()
    fold = lambda p: static_lib.fold(p, config, table)[1]
    abstract = any(isinstance(x, jax.ShapeDtypeStruct)
                   for x in jax.tree.leaves(params))
    params = jax.eval_shape(fold, params) if abstract else fold(params)
    return "word2vec", dataclasses.replace(config, ngram_buckets=0), params

  def flops_per_token(self) -> float:
    """Training FLOPs per row piece (forward and backward, 3x the forward):
    a few D-wide dot products per pair, not a vocabulary projection."""
    d, k, w = (self.config.embed_dim, self.options["negatives"],
               self.options["window"])
    pairs = w + 1  # a reach of (w + 1) / 2 on each side, on average
    forward = self.pair_flops(d, k, pairs)
    if self.config.ngram_buckets > 0:
      forward += d * self.config.max_ngrams  # the n-gram mean
    return 3.0 * forward

  def corrupt(self, batch, rng):
    """Subsampled, compacted rows, each centre's reach and the noise."""
    k_keep, k_reach, k_noise = jax.random.split(rng, 3)
    keep_p, cdf = self.sampling()
    tokens, sent = batch["tokens"], batch["sentence_ids"]
    ok = (tokens >= self.specials.first_regular) & (sent > 0)
    keep = ok & (jax.random.uniform(k_keep, tokens.shape)
                 < jnp.take(jnp.asarray(keep_p), tokens))
    keep, tokens, sent = compact(keep, tokens, sent)
    window = self.options["window"]
    reach = jax.random.randint(k_reach, tokens.shape, 1, window + 1)
    noise = sample_noise(k_noise, cdf,
                         tokens.shape + self.noise_slots())
    return {"tokens": jnp.where(keep, tokens, 0),
            "sentence_ids": jnp.where(keep, sent, 0), "reach": reach,
            "noise": noise}

  def noise_slots(self) -> tuple[int, ...]:
    """Trailing shape of the noise draws per position."""
    raise NotImplementedError

  def model_inputs(self, inputs):
    grams = self.ngrams(inputs["tokens"])
    return (inputs["tokens"],) + (() if grams is None else (grams,)), {}

  def out(self, params, ids):
    """Output-table rows: ids [...] -> [..., D]."""
    return self.model.apply({"params": params["model"]}, ids,
                            method="output_vectors")

  def contexts(self, inputs):
    return contexts(inputs["tokens"], inputs["sentence_ids"],
                    inputs["reach"], self.options["window"])


@register
class SkipGram(_Word2Vec):
  """Skip-gram with negative sampling: the centre predicts its context."""
  name = "skipgram"

  def noise_slots(self):
    return (2 * self.options["window"], self.options["negatives"])

  def pair_flops(self, d, k, pairs):
    return 2.0 * d * (1 + k) * pairs  # every pair scores 1 + k rows

  def score(self, params, inputs, outputs, rng, deterministic):
    ctx, valid = self.contexts(inputs)
    center = outputs["hidden"][:, :, None, :]
    return {"sgns": negative_sums(
        center, self.out(params, ctx), self.out(params, inputs["noise"]),
        valid, inputs["noise"] == ctx[..., None])}


@register
class CBOW(_Word2Vec):
  """Continuous bag of words: the mean of the context predicts the centre."""
  name = "cbow"

  def noise_slots(self):
    return (self.options["negatives"],)

  def pair_flops(self, d, k, pairs):
    return d * pairs + 2.0 * d * (1 + k)  # the context mean, 1 + k rows

  def score(self, params, inputs, outputs, rng, deterministic):
    _, valid = self.contexts(inputs)
    vecs = jnp.stack([shift(outputs["hidden"], o)
                      for o in offsets(self.options["window"])], 2)
    n = valid.sum(-1, keepdims=True)
    mean = static_lib.mean_of((vecs * valid[..., None]).sum(2), n,
                              self.config.mean_update)
    center = inputs["tokens"]
    return {"cbow": negative_sums(
        mean, self.out(params, center), self.out(params, inputs["noise"]),
        n[..., 0] > 0, inputs["noise"] == center[..., None])}
