"""word2vec's schemes: subsampling, windows, the negative-sampling loss."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import objectives
from objectives import common
from objectives import static as w2v
from tests import objective_checks as testing
from zoo import models
from zoo.models import static

V = testing.VOCAB
SPECIALS = testing.SPECIALS


def _counts(seed=0):
  """Zipf-like counts of the ordinary pieces; specials and sentinels 0."""
  c = np.zeros(V, np.int64)
  first, last = SPECIALS.first_regular, SPECIALS.last_regular
  c[first:last + 1] = 10_000 // np.arange(1, last - first + 2)
  return c


def _build(name="skipgram", family="word2vec", **options):
  options.setdefault("counts", _counts())
  return objectives.build(name, family, "tiny", SPECIALS, **options)


def test_subsampling_probabilities_by_hand():
  # N = 10,000 pieces, t = 1e-3: t N = 10.
  counts = np.zeros(6, np.int64)
  counts[2:6] = [1000, 40, 10, 8950]
  release = w2v.keep_probability(counts, 1e-3, "release")
  paper = w2v.keep_probability(counts, 1e-3, "paper")
  # word2vec.c / gensim: (sqrt(c / tN) + 1) tN / c, at most 1.
  np.testing.assert_allclose(release[2:5], [11 * 10 / 1000, 3 * 10 / 40, 1.0],
                             rtol=1e-6)
  # The paper: keep with sqrt(t / f) = sqrt(tN / c).
  np.testing.assert_allclose(paper[2:5], [0.1, 0.5, 1.0], rtol=1e-6)
  assert release[0] == paper[0] == 1.0  # unseen pieces are never dropped
  assert (w2v.keep_probability(counts, 0.0, "paper") == 1.0).all()
  with pytest.raises(ValueError, match="subsample 'both'"):
    w2v.keep_probability(counts, 1e-3, "both")


def test_pieces_are_kept_at_their_probability():
  counts = _counts()
  obj = _build(counts=counts, sample=1e-2)
  tokens = jnp.full((64, 256), SPECIALS.first_regular, jnp.int32)
  ones = jnp.ones_like(tokens)
  batch = {"tokens": tokens, "sentence_ids": ones, "doc_ids": ones,
           "word_ids": jnp.cumsum(ones, 1)}
  kept = obj.corrupt(common.as_batch(batch), jax.random.key(0))
  rate = float((kept["tokens"] > 0).mean())
  want = obj.sampling()[0][SPECIALS.first_regular]
  assert 0.05 < want < 0.5 and abs(rate - want) < 0.01
  # Kept pieces close up at the front of each row.
  alive = np.asarray(kept["tokens"] > 0)
  assert (np.sort(alive, axis=1)[:, ::-1] == alive).all()


def test_noise_follows_counts_to_the_power():
  counts = np.zeros(V, np.int64)
  counts[10], counts[11] = 1600, 100  # weights 1600^.75 : 100^.75 = 8 : 1
  cdf = w2v.noise_cdf(counts, 0.75, SPECIALS.first_regular,
                      SPECIALS.last_regular)
  draws = np.asarray(w2v.sample_noise(jax.random.key(0), cdf, (90_000,)))
  assert set(np.unique(draws)) == {10, 11}
  assert abs((draws == 10).mean() - 8 / 9) < 0.005


def test_windows_stay_in_their_sentence_and_reach():
  tokens = jnp.array([[11, 12, 13, 14, 15, 0]], jnp.int32)
  sent = jnp.array([[1, 1, 1, 2, 2, 0]], jnp.int32)
  reach = jnp.array([[2, 1, 2, 2, 2, 2]], jnp.int32)
  ids, valid = w2v.contexts(tokens, sent, reach, window=2)
  got = {t: sorted(int(ids[0, t, c]) for c in range(4) if valid[0, t, c])
         for t in range(6)}
  assert got == {0: [12, 13], 1: [11, 13], 2: [11, 12], 3: [15], 4: [14],
                 5: []}


def _hand_batch():
  """One sentence of three pieces, nothing subsampled, window 1."""
  tokens = jnp.array([[20, 21, 22, 1]], jnp.int32)
  return {"tokens": tokens, "sentence_ids": jnp.array([[1, 1, 1, 0]]),
          "doc_ids": jnp.array([[1, 1, 1, 1]]),
          "word_ids": jnp.array([[1, 2, 3, 4]])}


def _hand_params(obj, batch, seed=3):
  params = common.nn.meta.unbox(obj.init(jax.random.key(0), batch))
  k1, k2 = jax.random.split(jax.random.key(seed))
  model = params["model"]
  model["input_embedding"] = jax.random.normal(k1, model["input_embedding"]
                                               .shape)
  model["output_embedding"] = jax.random.normal(k2, model[
      "output_embedding"].shape)
  return params


def _sigmoid(x):
  return 1 / (1 + np.exp(-x))


def test_skipgram_loss_by_hand():
  counts = np.zeros(V, np.int64)
  counts[[20, 21, 22]] = 5
  counts[30] = 10**9  # the noise is (almost) always piece 30
  obj = _build(counts=counts, sample=0.0, window=1, negatives=2)
  batch = _hand_batch()
  params = _hand_params(obj, batch)
  loss, m = obj.loss(params, batch, jax.random.key(5), deterministic=True)
  vin = np.asarray(params["model"]["input_embedding"], np.float64)
  vout = np.asarray(params["model"]["output_embedding"], np.float64)
  pairs = [(20, 21), (21, 20), (21, 22), (22, 21)]  # (centre, context)
  nll = [-np.log(_sigmoid(vout[c] @ vin[w]))
         - 2 * np.log(_sigmoid(-vout[30] @ vin[w])) for w, c in pairs]
  assert float(m["weight_sum"]) == 4
  np.testing.assert_allclose(float(m["loss_sum"]), sum(nll), rtol=1e-5)
  np.testing.assert_allclose(float(loss), np.mean(nll), rtol=1e-5)


def test_cbow_loss_by_hand():
  counts = np.zeros(V, np.int64)
  counts[[20, 21, 22]] = 5
  counts[30] = 10**9
  obj = _build("cbow", counts=counts, sample=0.0, window=1, negatives=3)
  batch = _hand_batch()
  params = _hand_params(obj, batch)
  _, m = obj.loss(params, batch, jax.random.key(5), deterministic=True)
  vin = np.asarray(params["model"]["input_embedding"], np.float64)
  vout = np.asarray(params["model"]["output_embedding"], np.float64)
  context = {20: [21], 21: [20, 22], 22: [21]}
  nll = 0.0
  for w, ctx in context.items():
    h = vin[ctx].mean(0)
    nll += -np.log(_sigmoid(vout[w] @ h)) - 3 * np.log(_sigmoid(-vout[30] @ h))
  assert float(m["weight_sum"]) == 3
  np.testing.assert_allclose(float(m["loss_sum"]), nll, rtol=1e-5)


def test_cbow_release_update_gives_each_context_row_the_whole_error():
  counts = np.zeros(V, np.int64)
  counts[[20, 21, 22]] = 5
  counts[30] = 10**9
  obj = _build("cbow", counts=counts, sample=0.0, window=1, negatives=3,
               model_args={"mean_update": "release"}, reduction="sum")
  batch = _hand_batch()
  params = _hand_params(obj, batch)
  grads = jax.grad(lambda p: obj.loss(p, batch, jax.random.key(5), True)[0])(
      params)["model"]["input_embedding"]
  vin = np.asarray(params["model"]["input_embedding"], np.float64)
  vout = np.asarray(params["model"]["output_embedding"], np.float64)
  context = {20: [21], 21: [20, 22], 22: [21]}
  want = np.zeros_like(vin)
  for w, ctx in context.items():  # d nll / d h, added to every context row
    h = vin[ctx].mean(0)
    err = (-(1 - _sigmoid(vout[w] @ h)) * vout[w]
           + 3 * _sigmoid(vout[30] @ h) * vout[30])
    want[ctx] += err
  np.testing.assert_allclose(grads[20:23], want[20:23], rtol=1e-4,
                             atol=1e-6)


def test_sum_reduction_is_the_pairs_summed_loss():
  batch = testing.tiny_batch()
  mean, summed = _build(sample=0.0), _build(sample=0.0, reduction="sum")
  params = _hand_params(mean, batch)
  (lm, m), gm = jax.value_and_grad(
      lambda p: mean.loss(p, batch, jax.random.key(2), True), has_aux=True)(
          params)
  (ls, m2), gs = jax.value_and_grad(
      lambda p: summed.loss(p, batch, jax.random.key(2), True),
      has_aux=True)(params)
  n = float(m["weight_sum"])
  assert n > 10 and float(m2["loss_sum"]) == float(m["loss_sum"])
  np.testing.assert_allclose(float(ls), float(m["loss_sum"]), rtol=1e-5)
  np.testing.assert_allclose(float(ls), n * float(lm), rtol=1e-5)
  for a, b in zip(jax.tree.leaves(gs), jax.tree.leaves(gm)):
    np.testing.assert_allclose(a, n * b, rtol=1e-4, atol=1e-6)
  with pytest.raises(ValueError, match="reduction 'max' is not one of"):
    _build(reduction="max")


def test_a_noise_draw_of_the_true_piece_is_skipped():
  center = jnp.ones((1, 4))
  positive = jnp.ones((1, 4))
  noise = jnp.stack([jnp.ones(4), -jnp.ones(4)])[None]
  clash = jnp.array([[True, False]])
  got = w2v.negative_sums(center, positive, noise, jnp.array([True]), clash)
  want = -np.log(_sigmoid(4.0)) - np.log(_sigmoid(4.0))
  np.testing.assert_allclose(float(got["loss_sum"]), want, rtol=1e-6)
  assert float(got["correct_sum"]) == 1


@pytest.mark.parametrize("name,family", [("skipgram", "word2vec"),
                                         ("cbow", "word2vec"),
                                         ("skipgram", "fasttext")])
def test_loss_falls_on_a_fixed_batch(name, family):
  options = {}
  if family == "fasttext":
    config = models.make_config(family, "tiny", vocab_size=V,
                                ngram_buckets=512)
    pieces = [f"p{i}" for i in range(V)]
    options = dict(model_args={"ngram_buckets": 512},
                   ngram_table=lambda: static.ngram_table(pieces, config))
  obj = _build(name, family, sample=0.0, **options)
  out = testing.train(obj, testing.tiny_batch(), steps=40, lr=5e-2)
  assert out["finite"]
  assert abs(out["first"] - 6 * np.log(2)) < 0.05  # zero output table
  assert out["last"] < 0.7 * out["first"], out


def test_fasttext_backbone_is_the_folded_word2vec():
  config = models.make_config("fasttext", "tiny", vocab_size=V,
                              ngram_buckets=64)
  pieces = [f"p{i}" for i in range(V)]
  table = static.ngram_table(pieces, config)
  obj = _build(family="fasttext", model_args={"ngram_buckets": 64},
               ngram_table=table)
  params = obj.init(jax.random.key(0), testing.tiny_batch())
  family, w2v_config, backbone = obj.backbone(params)
  assert family == "word2vec" and w2v_config.ngram_buckets == 0
  want = static.fold(common.nn.meta.unbox(params)["model"], config, table)[1]
  np.testing.assert_array_equal(backbone["input_embedding"],
                                want["input_embedding"])


def test_missing_counts_and_other_families_are_refused():
  obj = objectives.build("skipgram", "word2vec", "tiny", SPECIALS)
  batch = testing.tiny_batch()
  params = obj.init(jax.random.key(0), batch)  # the tables need no counts
  with pytest.raises(ValueError, match="needs the corpus's piece counts"):
    obj.loss(params, batch, jax.random.key(1))
  with pytest.raises(ValueError, match="trains word2vec or fasttext"):
    objectives.build("cbow", "bert", "tiny", SPECIALS, counts=_counts())
  bad = _build(counts=np.ones(7))
  with pytest.raises(ValueError, match=r"counts \(7,\) do not cover"):
    bad.loss(params, batch, jax.random.key(1))
  fasttext = _build(family="fasttext", ngram_table=np.zeros((7, 3)))
  with pytest.raises(ValueError, match=r"ngram_table \(7, 3\) does not"):
    fasttext.backbone(fasttext.init(jax.random.key(0), batch))
