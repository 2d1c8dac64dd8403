"""The non-neural floor: bag of words for tasks, an n-gram LM for pairs.

    preds, labels = bow_predictions(data.tasks.load("trec"), tok)
    lm = train_ngram(texts, tok, order=3)
    lm.score(tok.encode_batch(sentences))            # float64 [B] log-probs

The bag of words is the probe of `zoo.harness.probe` (same recipe) on
log(1 + count) of each SentencePiece id. The n-gram model is interpolated
Kneser-Ney with one absolute discount per order, ending in a uniform
distribution over the vocabulary, so that every sequence, even of ids never
seen in training, gets a finite score.

Letters: N examples, V vocabulary, B sequences, T targets.
"""

import numpy as np

from data import annotate
from zoo.harness import probe as probe_lib


def _pad_eos(tokenizer) -> tuple[int, int]:
  specials = tokenizer.specials()
  return specials["pad"], specials["eos"]


def bow_features(texts: list[str], tokenizer,
                 vocab_size: int | None = None) -> np.ndarray:
  """Bag-of-pieces features: log(1 + count) of each id; pad and eos dropped.

  Args:
    texts: N strings.
    tokenizer: a `data.tokenizer` tokenizer.
    vocab_size: V (default: the tokenizer's).

  Returns:
    float32 [N, V].
  """
  vocab_size = vocab_size or tokenizer.vocab_size
  ids = tokenizer.encode_batch(list(texts))
  rows = np.repeat(np.arange(len(ids)), [len(x) for x in ids])
  flat = np.fromiter((i for x in ids for i in x), np.int64, len(rows))
  if flat.size and flat.max() >= vocab_size:
    raise ValueError(f"id {flat.max()} outside a vocabulary of {vocab_size}")
  keep = ~np.isin(flat, _pad_eos(tokenizer))
  counts = np.bincount(rows[keep] * vocab_size + flat[keep],
                       minlength=len(ids) * vocab_size)
  return np.log1p(counts.reshape(len(ids), vocab_size)).astype(np.float32)


def _text(example: dict) -> str:
  """The text a bag of words reads (both sides of a pair)."""
  return " ".join(example[k] for k in ("text", "text_b") if k in example)


def bow_predictions(task, tokenizer, split: str = "validation",
                    recipe: probe_lib.Recipe = probe_lib.Recipe(),
                    min_count: int = 3) -> tuple[np.ndarray, np.ndarray]:
  """Bag-of-words probe fitted on all of train, predicting all of `split`.

  Args:
    task: a `data.tasks.Task` of kind "class" (or "pair", as one text).
    tokenizer: the tokenizer whose pieces are the words.
    split: the evaluation split.
    recipe: the probe's recipe.
    min_count: keep the pieces found in at least this many train examples.
      Standardisation scales a piece seen in k of N examples up to about
      sqrt(N / k), so pieces seen once or twice would otherwise be the
      cheapest to weigh and the probe would memorise them.

  Returns:
    (predictions int32 [N], labels int32 [N]) on `split`.
  """
  if task.kind not in ("class", "pair"):
    raise ValueError(f"bag of words needs a class task, got {task.kind!r}")
  train = bow_features([_text(ex) for ex in task.train], tokenizer)
  held = bow_features([_text(ex) for ex in task.splits[split]], tokenizer)
  keep = np.flatnonzero((train > 0).sum(0) >= min_count)
  probe = probe_lib.fit(train[:, keep], [ex["label"] for ex in task.train],
                        len(task.labels), recipe)
  labels = np.array([ex["label"] for ex in task.splits[split]], np.int32)
  return probe_lib.predict(probe, held[:, keep]), labels


class _Table:
  """A sorted int64 key -> int64 value map, looked up in bulk."""

  def __init__(self, keys: np.ndarray, values: np.ndarray):
    order = np.argsort(keys, kind="stable")
    self.keys, self.values = keys[order], values[order]

  def get(self, keys: np.ndarray) -> np.ndarray:
    """Values of `keys` (0 where absent)."""
    if not self.keys.size:
      return np.zeros(keys.shape, np.int64)
    at = np.minimum(np.searchsorted(self.keys, keys), self.keys.size - 1)
    return np.where(self.keys[at] == keys, self.values[at], 0)


class NgramLM:
  """An interpolated Kneser-Ney n-gram model over ids in [0, V).

  Each sequence is preceded by order - 1 start symbols and followed by an
  end symbol; the model predicts V + 1 outcomes: the ids and the end (id V).
  The highest order uses counts, lower orders continuation counts (how many
  distinct symbols precede), except n-grams that open with a start symbol,
  which nothing precedes and which keep their counts (as KenLM does).
  Discounts D = n1 / (n1 + 2 n2) per order; below the unigrams, a uniform
  distribution over the V + 1 outcomes.

  Attributes:
    vocab_size: V.
    order: n, set by `fit`.
    end: the end symbol's id, V.
  """

  def __init__(self, vocab_size: int):
    self.vocab_size = vocab_size
    self.end, self._start = vocab_size, vocab_size + 1
    self._base = vocab_size + 2  # the digits of an n-gram's int64 key
    self.order = 0
    self._levels: list[dict] = []

  def _pad(self, sequences) -> tuple[np.ndarray, np.ndarray]:
    """Padded symbols int64 [P] and the positions of targets int64 [T]."""
    if not self.order:
      raise ValueError("NgramLM.fit has not run")
    parts, targets, offset = [], [], 0
    for seq in sequences:
      seq = np.asarray(seq, np.int64)
      if seq.size and (seq.min() < 0 or seq.max() >= self.vocab_size):
        raise ValueError(f"ids outside [0, {self.vocab_size})")
      parts += [np.full(self.order - 1, self._start), seq, [self.end]]
      targets.append(offset + self.order - 1 + np.arange(seq.size + 1))
      offset += self.order + seq.size
    return np.concatenate(parts), np.concatenate(targets)

  def _keys(self, symbols: np.ndarray, targets: np.ndarray, k: int):
    """Keys int64 [T] of the k-grams ending at `targets`."""
    key = np.zeros(targets.shape, np.int64)
    for j in range(k - 1, -1, -1):
      key = key * self._base + symbols[targets - j]
    return key

  def fit(self, sequences, order: int = 3) -> "NgramLM":
    """Counts the n-grams of `sequences` (lists of ids); returns self."""
    if order < 1 or self._base ** order >= 2 ** 62:
      raise ValueError(f"order {order} does not fit int64 keys for "
                       f"V={self.vocab_size}")
    if not len(sequences):
      raise ValueError("NgramLM.fit needs at least one sequence")
    self.order = order
    symbols, targets = self._pad(sequences)
    grams = [None] + [np.unique(self._keys(symbols, targets, k),
                                return_counts=True)
                      for k in range(1, order + 1)]
    self._levels = [self._level(grams, k) for k in range(1, order + 1)]
    return self

  def _level(self, grams: list, k: int) -> dict:
    """Counts (or continuation counts), context sums and discount of order k."""
    keys, counts = grams[k]
    if k < self.order:
      longer = grams[k + 1][0] % self._base ** k  # drop the first symbol
      types, cont = np.unique(longer, return_counts=True)
      starts = keys // self._base ** (k - 1) == self._start
      counts = np.where(starts, counts, _Table(types, cont).get(keys))
    ctx, inverse = np.unique(keys // self._base, return_inverse=True)
    n1, n2 = np.sum(counts == 1), np.sum(counts == 2)
    discount = n1 / (n1 + 2 * n2) if n1 and n2 else 0.5
    return dict(grams=_Table(keys, counts), discount=float(discount),
                totals=_Table(ctx, np.bincount(inverse, weights=counts)
                              .astype(np.int64)),
                types=_Table(ctx, np.bincount(inverse).astype(np.int64)))

  def _log_probs(self, symbols: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Natural log-probs float64 [T] of `symbols[targets]` given the past."""
    p = np.full(targets.shape, 1.0 / (self.vocab_size + 1))
    for k, level in enumerate(self._levels, 1):
      keys = self._keys(symbols, targets, k)
      ctx = keys // self._base
      total = level["totals"].get(ctx).astype(np.float64)
      d = level["discount"]
      mass = np.maximum(level["grams"].get(keys) - d, 0.0)
      mixed = (mass + d * level["types"].get(ctx) * p) / np.maximum(total, 1)
      p = np.where(total > 0, mixed, p)
    return np.log(p)

  def score(self, sequences) -> np.ndarray:
    """Sum of log-probs of each sequence's ids and its end, float64 [B]."""
    if not len(sequences):
      return np.zeros(0)
    symbols, targets = self._pad(sequences)
    logp = self._log_probs(symbols, targets)
    lengths = [len(s) + 1 for s in sequences]
    return np.add.reduceat(logp, np.cumsum([0] + lengths[:-1]))

  def log_prob(self, context, ids=None) -> np.ndarray:
    """Log-probs of next ids after a context.

    Args:
      context: the ids so far (start symbols fill in for missing history).
      ids: [K] candidate next ids in [0, V] (V is the end); default all
        V + 1 outcomes, which sum to 1.

    Returns:
      float64 [K] natural log-probs.
    """
    ids = np.arange(self.vocab_size + 1) if ids is None else np.asarray(ids)
    width = self.order  # each row: order - 1 history symbols, then the id
    history = [self._start] * (width - 1) + [int(i) for i in context]
    rows = np.tile(np.array(history[len(history) - width + 1:] + [0],
                            np.int64), (ids.size, 1))
    rows[:, -1] = ids
    return self._log_probs(rows.ravel(),
                           width * np.arange(ids.size) + width - 1)


def train_ngram(texts, tokenizer, order: int = 3) -> NgramLM:
  """An `NgramLM` on the pieces of `texts`, one sequence per sentence.

  Args:
    texts: strings (documents); each is cut into sentences by
      `data.annotate.split_sentences` (lines always split).
    tokenizer: a `data.tokenizer` tokenizer.
    order: n.

  Returns:
    The fitted model.
  """
  sentences = [s for text in texts for s in annotate.split_sentences(text)]
  return NgramLM(tokenizer.vocab_size).fit(
      tokenizer.encode_batch(sentences), order)


def floors(pairs: dict, tasks: dict, tokenizer, grid, split: str) -> dict:
  """The non-neural floor of every view, in the views' result format.

  Minimal pairs: a trigram LM over the pieces of the sample's training
  split. Probe: bag of words fitted on each task's whole train split.
  Few-shot: bag of words fitted on each seed's K-shot training set (the
  sets the neural rows fine-tune on).

  Args:
    pairs: phenomenon -> `data.minimal_pairs.Pair`s.
    tasks: name -> class `Task`.
    tokenizer: the grid's tokenizer.
    grid: the grid (its `seeds`, `few_shot.k` and pre-training data).
    split: the evaluation split.
  """
  from data import minimal_pairs as pairs_lib  # pylint: disable=import-outside-toplevel
  from zoo.harness import few_shot, minimal_pairs  # pylint: disable=import-outside-toplevel
  texts = pairs_lib.training_texts(grid.pretrain.data.sample_dir or None)
  lm = train_ngram(texts, tokenizer)
  out = {"minimal_pairs": minimal_pairs.score_pairs(
      lambda batch: lm.score(tokenizer.encode_batch(batch)), pairs)}
  out["probe"] = {"tasks": {}}
  out["few_shot"] = {"tasks": {}}
  for name, task in tasks.items():
    preds, labels = bow_predictions(task, tokenizer, split)
    out["probe"]["tasks"][name] = {"metric": task.metric,
                                   "labels": labels.tolist(),
                                   "preds": [preds.tolist()]}
    shots = [bow_predictions(few_shot.with_train(task, few_shot.subset(
        task, int(grid.few_shot.k), int(seed))), tokenizer, split,
                             min_count=1)[0].tolist()
             for seed in grid.seeds]
    out["few_shot"]["tasks"][name] = {"metric": task.metric,
                                      "labels": labels.tolist(),
                                      "preds": shots}
  return out
