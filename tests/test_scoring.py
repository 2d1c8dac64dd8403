"""`zoo.scoring`: each family's score equals its definition, computed by hand.

Brute-force references run the plain `model.apply` once per masked piece,
build the encoder-decoder inputs with the objectives' own transforms, and
read the objectives' own loss conventions.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import objectives
import zoo
from configs.compare import smoke
from objectives import common
from objectives import noise
from objectives import encdec
from objectives import transforms
from tests.fast_params import fast_params
from zoo import loading, models, scoring, train

SPECIALS = objectives.Specials(vocab_size=512)
FAMILIES = ("bert", "roberta", "albert", "distilbert", "unilm", "gpt2", "t5",
            "bart", "electra", "elmo")
METHODS = {"gpt2": "causal", "t5": "sentinel", "bart": "infill",
           "electra": "discriminator", "elmo": "bidirectional_lm"}


def _tokens() -> np.ndarray:
  """int32 [2,7]: `pieces eos` rows, the first right-padded (pad 0)."""
  ids = np.random.RandomState(0).randint(7, 400, (2, 7)).astype(np.int32)
  ids[:, -1] = SPECIALS.eos
  ids[0, 3], ids[0, 4:] = SPECIALS.eos, SPECIALS.pad
  return ids


def _setup(family: str, **overrides):
  """(config, model, unboxed random params) of a tiny family."""
  config = models.make_config(family, "tiny", **overrides)
  model = models.get(family).Model(config)
  tok = jnp.asarray(_tokens())
  args = (tok, tok) if models.interface_of(family, config) == "encdec" else (
      tok,)
  return config, model, nn.meta.unbox(fast_params(model, *args)["params"])


def _score(family, config, params, tokens):
  return scoring.score(family, config, params, tokens, SPECIALS)


def _ordinary(row: np.ndarray) -> list[int]:
  """Positions of the ordinary pieces of one row (what masking may touch)."""
  return list(np.flatnonzero(np.asarray(noise.eligible(row, SPECIALS))))


def _log_softmax(logits) -> np.ndarray:
  return np.asarray(jax.nn.log_softmax(jnp.asarray(logits, jnp.float32)))


@pytest.mark.parametrize("family", FAMILIES)
def test_method_names(family):
  config = models.make_config(family, "tiny")
  assert scoring.method(family, config) == METHODS.get(family, "pll")


def test_encoder_decoders_are_read_as_their_scheme_corrupts():
  config = models.make_config("t5", "tiny")
  want = {"t5": "sentinel", "t5_span": "sentinel", "t5_iid": "sentinel",
          "t5_bert": "infill", "t5_mass": "infill", "t5_drop": "dropped",
          "t5_prefix_lm": "prefix", "t5_deshuffle": "deshuffle",
          "bart": "infill", None: "sentinel", "none": "sentinel"}
  for objective, how in want.items():
    assert scoring.method("t5", config, objective) == how, objective
  assert scoring.method("bart", models.make_config("bart", "tiny"),
                        "t5_drop") == "dropped"
  with pytest.raises(ValueError, match="t5_nope"):
    scoring.method("t5", config, "t5_nope")
  with pytest.raises(ValueError, match="gpt2 is scored by 'causal', not"
                     " 'infill'"):
    scoring.score("gpt2", models.make_config("gpt2", "tiny"), {}, _tokens(),
                  SPECIALS, "infill")
  # An encoder is read by PLL whatever its scheme.
  assert scoring.method("bert", models.make_config("bert", "tiny"),
                        "t5_drop") == "pll"


def test_mlm_variants_of_other_families_use_pll():
  for family, kw in (("t5", {"encoder_only": True}),
                     ("electra", {"role": "generator"})):
    assert scoring.method(family, models.make_config(
        family, "tiny", **kw)) == "pll"


def test_pll_equals_masking_one_piece_at_a_time():
  config, model, params = _setup("bert")
  apply = jax.jit(lambda t: model.apply({"params": params}, t)["logits"])
  tokens = _tokens()
  want = []
  for row in tokens:
    total = 0.0
    for t in _ordinary(row):
      masked = row.copy()
      masked[t] = SPECIALS.mask
      total += _log_softmax(apply(jnp.asarray(masked[None]))[0, t])[row[t]]
    want.append(total)
  np.testing.assert_allclose(_score("bert", config, params, tokens), want,
                             rtol=0, atol=1e-5)


def test_causal_sums_next_token_log_probs_from_the_second_piece():
  config, model, params = _setup("gpt2")
  tokens = _tokens()
  logp = _log_softmax(model.apply({"params": params},
                                  jnp.asarray(tokens))["logits"])
  want = [sum(logp[b, t - 1, tokens[b, t]]
              for t in range(1, tokens.shape[1]) if tokens[b, t] != 0)
          for b in range(len(tokens))]
  np.testing.assert_allclose(_score("gpt2", config, params, tokens), want,
                             rtol=0, atol=1e-5)


def _t5_reference(model, params, row) -> float:
  """Sum over t of log p(x_t) in `t5_span`'s format for the span {t}."""
  doc = jnp.asarray((row != 0).astype(np.int32)[None])
  tok = jnp.asarray(row[None])
  total = 0.0
  for t in _ordinary(row):
    mask = jnp.zeros_like(tok, bool).at[0, t].set(True)
    enc = transforms.noise_span_to_unique_sentinel(tok, mask, doc, SPECIALS,
                                                   len(row))
    dec = transforms.nonnoise_span_to_unique_sentinel(tok, mask, doc,
                                                      SPECIALS, len(row))
    assert list(dec["tokens"][0, :2]) == [SPECIALS.sentinel(0), row[t]]
    dec_in = common.shift_right(dec["tokens"], dec["segment_ids"], 0)
    logits = model.apply({"params": params}, enc["tokens"], dec_in,
                         enc_segment_ids=enc["segment_ids"],
                         dec_segment_ids=dec["segment_ids"])["logits"]
    total += _log_softmax(logits[0, 1])[row[t]]
  return total


def _logp(model, params, enc, dec_in, targets) -> float:
  """Teacher-forced sum of log p(targets) of one row (no padding)."""
  logits = model.apply({"params": params}, jnp.asarray([enc]),
                       jnp.asarray([dec_in]))["logits"][0]
  lp = _log_softmax(logits)
  return float(sum(lp[i, x] for i, x in enumerate(targets)))


def _infill_reference(model, config, params, row) -> float:
  """Sum over t of log p(x_t) with x_t masked, the original row decoded."""
  doc = jnp.asarray((row != 0).astype(np.int32)[None])
  dec = encdec.original({"tokens": jnp.asarray(row[None]),
                         "doc_ids": doc}, len(row))
  dec_in = common.shift_right(dec["tokens"], dec["segment_ids"],
                              encdec.decoder_start(config))
  total = 0.0
  for t in _ordinary(row):
    masked = row.copy()
    masked[t] = SPECIALS.mask
    logits = model.apply({"params": params}, jnp.asarray(masked[None]),
                         dec_in, dec_segment_ids=dec["segment_ids"])["logits"]
    total += _log_softmax(logits[0, t])[row[t]]
  return total


def _dropped_reference(model, config, params, row) -> float:
  """Sum over t of log p(x_t | start) with x_t deleted from the input."""
  real, start = row[row != 0], encdec.decoder_start(config)
  return sum(_logp(model, params, np.delete(real, t), [start], [real[t]])
             for t in _ordinary(row))


def _prefix_reference(model, config, params, row) -> float:
  """log p(x_1 .. EOS | x_0 EOS), teacher-forced."""
  real, start = row[row != 0], encdec.decoder_start(config)
  return _logp(model, params, [real[0], SPECIALS.eos],
               [start, *real[1:-1]], real[1:])


def _deshuffle_reference(model, config, params, row) -> float:
  """log p(row | its fixed shuffle), the shuffle made of the row alone."""
  real, start = row[row != 0], encdec.decoder_start(config)
  shuffled = np.asarray(scoring.fixed_shuffle(
      {"tokens": jnp.asarray(real[None]),
       "doc_ids": jnp.ones((1, len(real)), jnp.int32)}, SPECIALS)["tokens"][0])
  assert shuffled[-1] == SPECIALS.eos
  assert sorted(shuffled[:-1]) == sorted(real[:-1])
  return _logp(model, params, shuffled, [start, *real[:-1]], real)


REFERENCES = {"infill": _infill_reference, "dropped": _dropped_reference,
              "prefix": _prefix_reference, "deshuffle": _deshuffle_reference}


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["t5_bert", "t5_drop", "t5_prefix_lm",
                                       "t5_deshuffle"])
def test_t5_scores_equal_their_schemes_formats(objective):
  tokens = _tokens()
  config, model, params = _setup("t5")
  reference = REFERENCES[scoring.method("t5", config, objective)]
  want = [reference(model, config, params, row) for row in tokens]
  got = scoring.score("t5", config, params, tokens, SPECIALS,
                      scoring.method("t5", config, objective))
  np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def test_deshuffle_moves_the_pieces_of_equal_length_rows_alike():
  rows = np.array([[11, 12, 13, 14, 15, 16, SPECIALS.eos, 0],
                   [11, 12, 13, 99, 15, 16, SPECIALS.eos, 0],
                   [21, 22, 23, 24, 25, 26, SPECIALS.eos, 0]], np.int32)
  batch = {"tokens": jnp.asarray(rows),
           "doc_ids": jnp.asarray((rows != 0).astype(np.int32))}
  got = np.asarray(scoring.fixed_shuffle(batch, SPECIALS)["tokens"])
  assert (got[:, 6:] == rows[:, 6:]).all()  # EOS last, padding kept
  assert not (got[0] == rows[0]).all()  # a real shuffle
  assert (got[0] != got[1]).sum() == 1  # the pair differs in one place
  np.testing.assert_array_equal(got[2, :6] - 10, got[0, :6])  # same order
  # A row's order does not depend on its padding.
  alone = scoring.fixed_shuffle({k: v[:1, :7] for k, v in batch.items()},
                                SPECIALS)["tokens"]
  np.testing.assert_array_equal(np.asarray(alone)[0], got[0, :7])


@pytest.mark.slow
def test_sentinel_scoring_equals_the_objectives_formats():
  tokens = _tokens()
  config, model, params = _setup("t5")
  want = [_t5_reference(model, params, row) for row in tokens]
  np.testing.assert_allclose(_score("t5", config, params, tokens), want,
                             rtol=0, atol=1e-5)
  config, model, params = _setup("bart")
  want = [_infill_reference(model, config, params, row) for row in tokens]
  np.testing.assert_allclose(_score("bart", config, params, tokens), want,
                             rtol=0, atol=1e-5)


def test_elmo_adds_the_forward_and_backward_lms():
  config, model, params = _setup("elmo")
  tokens = _tokens()
  out = model.apply({"params": params}, jnp.asarray(tokens))
  fwd, bwd = (_log_softmax(out[k]) for k in ("forward_logits",
                                             "backward_logits"))
  want = []
  for b, row in enumerate(tokens):
    n = int((row != 0).sum())
    want.append(sum(fwd[b, t - 1, row[t]] for t in range(1, n))
                + sum(bwd[b, t + 1, row[t]] for t in range(n - 1)))
  np.testing.assert_allclose(_score("elmo", config, params, tokens), want,
                             rtol=0, atol=1e-5)


def test_electra_scores_every_piece_as_original():
  config, model, params = _setup("electra")
  tokens = _tokens()
  logits = model.apply({"params": params}, jnp.asarray(tokens))["logits"]
  real = tokens != 0
  got = _score("electra", config, params, tokens)
  # The electra objective's loss with every label "original" (False).
  for b in range(len(tokens)):
    sums = common.binary_sums(logits[b:b + 1], np.zeros((1, 7), bool),
                              real[b:b + 1])
    np.testing.assert_allclose(got[b], -sums["loss_sum"], rtol=0, atol=1e-5)
  want = np.where(real, jax.nn.log_sigmoid(-logits), 0).sum(1)
  np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
  assert (got < 0).all()


@pytest.mark.parametrize("family,overrides,objective", [
    (f, {}, None) for f in FAMILIES] + [
        ("t5", {"encoder_only": True}, None),
        ("electra", {"role": "generator"}, None),
        ("t5", {}, "t5_drop"), ("t5", {}, "t5_prefix_lm"),
        ("t5", {}, "t5_deshuffle")])
@pytest.mark.slow
def test_a_score_does_not_depend_on_padding_or_batch(family, overrides,
                                                      objective):
  config, _, params = _setup(family, **overrides)
  tokens = _tokens()
  how = scoring.method(family, config, objective)
  alone = scoring.score(family, config, params, tokens[:1, :4], SPECIALS, how)
  together = scoring.score(family, config, params, tokens, SPECIALS, how)
  assert together.shape == (2,) and together.dtype == np.float32
  assert np.isfinite(together).all()
  np.testing.assert_allclose(together[0], alone[0], rtol=0, atol=1e-5)


def test_more_masked_copies_than_one_chunk(monkeypatch):
  config, _, params = _setup("bert")
  tokens = _tokens()
  want = _score("bert", config, params, tokens)
  monkeypatch.setattr(scoring, "CHUNK_TOKENS", 8)  # one copy per call
  np.testing.assert_allclose(_score("bert", config, params, tokens), want,
                             rtol=0, atol=1e-5)


def test_unscorable_families_are_a_clear_error():
  config = models.make_config("elmo", "tiny", char_cnn=True)
  with pytest.raises(ValueError, match="elmo"):
    scoring.method("elmo", config)
  with pytest.raises(ValueError, match="elmo"):
    _score("elmo", config, {}, _tokens())
  with pytest.raises(ValueError, match="no_such_family"):
    scoring.method("no_such_family", config)


TEXTS = ["the river bank was muddy", "a bank raised its rates again today",
         "hello", "she paid money into the bank"]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
  """A tiny GPT-2 trained with clm for two steps (one checkpoint)."""
  c = smoke.get_config().pretrain
  c.model, c.objective = "gpt2", "clm"
  c.steps, c.checkpoint_every, c.log_every = 2, 2, 2
  path = str(tmp_path_factory.mktemp("score") / "run")
  train.train(c, path)
  return path


@pytest.mark.slow
def test_loaded_score_through_zoo_load(workdir):
  m = zoo.load(workdir)
  got = m.score(TEXTS, batch_size=3)
  assert got.shape == (len(TEXTS),) and got.dtype == np.float32
  specials = m.tokenizer.specials()
  for text, value in zip(TEXTS, got):
    want = scoring.score(m.family, m.config, m.params, m.batch([text]),
                         specials)
    np.testing.assert_allclose(value, want[0], rtol=0, atol=1e-4)
  assert m.score([]).shape == (0,)


@pytest.mark.slow
def test_loaded_score_of_an_unscorable_family_names_it(workdir):
  m = zoo.load(workdir)
  config = models.make_config("elmo", "tiny", char_cnn=True)
  bad = loading.Loaded("elmo", config, {}, m.tokenizer, None, "nowhere")
  with pytest.raises(ValueError, match="elmo"):
    bad.score(TEXTS)
