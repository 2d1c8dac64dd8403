"""Zero-shot minimal pairs: does the model prefer the grammatical sentence?

Each pair of `data.minimal_pairs` is scored by the family's natural
log-likelihood (`zoo.load(...).score`, see `zoo.scoring`): summed
log-probs for decoders, pseudo-log-likelihood for MLM encoders,
encoder-decoders in their pre-training scheme's format (sentinel scoring
after span corruption, infilling after BART or BERT-style corruption, and
so on: `zoo.scoring.method`), forward plus backward LM for ELMo, the
discriminator's "all original" log-probability for ELECTRA. A pair scores
1 when the good sentence gets the higher likelihood, 0.5 on a tie, 0
otherwise; the view reports the percentage per phenomenon. The suite is
balanced, so a scorer blind to context sits at 50 on every phenomenon.

Letters: N pairs.
"""

import numpy as np

from zoo import distributed, scoring


def outcomes(good: np.ndarray, bad: np.ndarray) -> np.ndarray:
  """float32 [N]: 1 where good > bad, 0.5 on ties, 0 otherwise (NaN where
  a score is NaN: no likelihood)."""
  good, bad = np.asarray(good, np.float64), np.asarray(bad, np.float64)
  out = np.where(good > bad, 1.0, np.where(good == bad, 0.5, 0.0))
  return np.where(np.isnan(good) | np.isnan(bad), np.nan, out).astype(
      np.float32)


def score_pairs(score_fn, pairs: dict) -> dict:
  """The view of any scorer `score_fn(texts) -> float [B]` on a suite.

  Args:
    score_fn: one log-likelihood per text.
    pairs: phenomenon -> list of `data.minimal_pairs.Pair`.

  Returns:
    {"tasks": {phenomenon: {"metric": "mean", "preds": [[0|0.5|1] * N]}}}.
  """
  out = {}
  for phenomenon, items in pairs.items():
    texts = [p.good for p in items] + [p.bad for p in items]
    scores = np.asarray(score_fn(texts), np.float64)
    n = len(items)
    out[phenomenon] = {"metric": "mean",
                       "preds": [outcomes(scores[:n], scores[n:]).tolist()]}
  return {"tasks": out}


def run(loaded, pairs: dict, batch_size: int = 256,
        how: str | None = None) -> dict:
  """The view of a loaded model (`zoo.loading.Loaded`), in chunks of texts
  dealt out across processes (`distributed.split_work`); `how` reads it
  by another of its scorings (`Loaded.score`).

  A backbone pre-trained without the head its scoring reads (Quick-Thought
  trains no LM head) has no likelihood: its outcomes are NaN, reported as
  "n/a", with the reason under "skipped".

  Returns:
    `score_pairs`'s dict plus "method", the scoring used.
  """
  why = scoring.missing_head(loaded.family, loaded.config, loaded.params)
  if why:
    out = score_pairs(lambda texts: np.full(len(texts), np.nan), pairs)
    return dict(out, method="none", skipped=why)

  def score_fn(texts):
    chunks = [texts[i:i + batch_size] for i in range(0, len(texts),
                                                       batch_size)]
    return np.concatenate(distributed.split_work(
        lambda chunk: np.asarray(loaded.score(chunk, how=how), np.float64),
        chunks))
  out = score_pairs(score_fn, pairs)
  out["method"] = how or loaded.scoring_method
  return out
