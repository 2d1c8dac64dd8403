"""Sentence log-likelihoods: each family scored the way it was pre-trained.

    m = zoo.load(path)
    m.score(["the cat sat on the mat", "the mat sat on the cat"])  # [2]

`score(family, config, params, tokens, specials)` returns one float per
row of right-padded ids (`Loaded.batch`); `method(family, config)` names
what it sums, over the row's real (non-pad) pieces x_0 .. x_{n-1}:

- "causal" (decoders: gpt2): sum_{t>=1} log p(x_t | x_<t), the row's final
  EOS included. x_0 is not scored: `clm` keeps packed documents apart
  (attention, positions and targets restart at each document), so a
  document's first piece is never a pre-training target and no EOS of a
  previous document is ever its context.
- "pll" (MLM encoders: bert, roberta, albert, distilbert, unilm, an
  ELECTRA generator, an encoder-only t5): the pseudo-log-likelihood of
  Salazar et al. 2020, sum_t log p(x_t | the row with x_t replaced by the
  mask id), over the ordinary pieces (not pad, eos, cls, sep, bos, mask).
- encoder-decoders, read the way their pre-training scheme corrupted the
  text (the scheme's `scoring`, `objectives.scoring_of`; a model without a
  known scheme gets its family's default: t5 "sentinel", bart "infill").
  Per piece, over the ordinary pieces, each x_t alone corrupted as the
  scheme corrupts a one-piece noise span:
  "sentinel" (t5_span, t5_iid): x_t becomes sentinel 0; the decoder is
  teacher-forced on the scheme's target for that span (`<s0> x_t <s1> eos`,
  or `<s0> x_t eos` when x_t is the last piece before EOS) after the start
  id, and the score of t is log p(x_t | start, <s0>) at decoder position 1
  (the decoder is causal, so only `start <s0>` is fed; sentinel and EOS
  log-probs are not counted).
  "infill" (bart, t5_bert, t5_mass): x_t becomes the mask id; the decoder
  is teacher-forced on the whole original row after the start id, and the
  score of t is log p(x_t | x_<t, encoder) at decoder position t.
  "dropped" (t5_drop): x_t is removed from the encoder input; the score of
  t is log p(x_t | start) at decoder position 0, the first of the scheme's
  target `x_t eos`.
  Whole rows, one pass a row, every real target piece counted:
  "prefix" (t5_prefix_lm): the encoder reads x_0 and EOS (the shortest
  prefix the scheme splits off); the decoder is teacher-forced on
  x_1 .. EOS, sum_{t>=1} log p(x_t | x_0, x_1 .. x_{t-1}), as "causal".
  "deshuffle" (t5_deshuffle): the encoder reads the row's pieces in a fixed
  pseudo-random order seeded by their count (EOS last), so the two
  sentences of a minimal pair, of equal length, are shuffled alike; the
  decoder is teacher-forced on the original row, EOS included.
- "bidirectional_lm" (elmo): sum_{t>=1} log p_fwd(x_t | x_<t) plus
  sum_{t<n-1} log p_bwd(x_t | x_>t), the pairs `bilm` trains on (the
  forward LM predicts through the EOS, the backward LM from it).
- "permutation_l2r" (xlnet): the left-to-right factorisation order of
  `plm`, sum_{t>=1} log p(x_t | x_<t) over the ordinary pieces (those `plm`
  predicts: EOS and markers are never its targets), in one pass a row:
  `perm_mask[i, j] = 1` for j >= i and the query stream at every position
  (`target_mapping` the identity). x_0 is not scored, as in "causal": its
  query stream would see no piece at all.
- "discriminator" (an ELECTRA discriminator): sum_t log sigmoid(-s_t) over
  every real piece (EOS, cls and sep included, as `electra` labels them),
  s_t the replaced-token logit (s_t > 0: "replaced"): the log-probability
  that the discriminator calls every piece original. Not a language-model
  likelihood: it is not normalised over texts.

Masked copies are built per (row, piece) and run in chunks of about
`CHUNK_TOKENS` pieces. Letters: B batch, T length, V vocab, C chunk rows.
"""

import functools

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

import objectives
from objectives import encdec
from objectives import noise
from objectives import transforms
from zoo import models

CHUNK_TOKENS = 4096  # pieces per model call (rows x length)
_BY_INTERFACE = {"decoder": "causal", "encoder": "pll",
                 "lstm": "bidirectional_lm"}
# Encoder-decoders whose corruption formats are known, and their default.
_ENCDEC = {"t5": "sentinel", "bart": "infill"}
ENCDEC_METHODS = ("sentinel", "infill", "dropped", "prefix", "deshuffle")
_WHOLE_ROW = ("causal", "bidirectional_lm", "discriminator",
              "permutation_l2r", "prefix", "deshuffle")  # one pass a row
# Encoder families whose forward takes `logits_at` (the head runs there only).
_LOGITS_AT = ("bert", "roberta", "albert", "distilbert", "unilm", "electra",
               "longformer", "mobilebert")


def method(family: str, config, objective: str | None = None) -> str:
  """The scoring of a family under a config (see the module docstring).

  Args:
    family: model family name.
    config: the family's `Config`.
    objective: the scheme it was pre-trained with (an encoder-decoder is
      read as its scheme corrupts; None: the family's default).

  Returns:
    "causal", "pll", "bidirectional_lm", "permutation_l2r",
    "discriminator", or one of `ENCDEC_METHODS`.

  Raises:
    ValueError: the family is unknown or has no natural sentence score.
  """
  face = models.interface_of(family, config)
  unscored = getattr(models.get(family), "NO_SENTENCE_SCORE", "")
  if unscored:
    raise ValueError(f"{family} has no natural sentence score: {unscored}")
  if family == "electra":
    roles = {"discriminator": "discriminator", "generator": "pll"}
    if config.role not in roles:
      raise ValueError(f"electra role {config.role!r} has no sentence score")
    return roles[config.role]
  if family == "xlnet":
    return "permutation_l2r"
  if face == "encdec" and family in _ENCDEC:
    known = objective not in (None, "", "none")  # "none": random init
    return (objectives.scoring_of(objective) if known else None) or (
        _ENCDEC[family])
  how = _BY_INTERFACE.get(face)
  if how is None:
    raise ValueError(f"{family} ({face} interface) has no natural sentence "
                     f"score; scored: decoders, MLM encoders, "
                     f"{tuple(_ENCDEC)}, token-table elmo, electra")
  if face == "lstm" and getattr(config, "char_cnn", False):
    raise ValueError(f"{family} with char_cnn=True reads character ids, "
                     "which score() is not given; score a token-table ELMo")
  return how


def missing_head(family: str, config, params) -> str | None:
  """Why `params` cannot be scored (a family with no sentence score, as a
  static embedding; a backbone pre-trained without the LM head its scoring
  reads, as Quick-Thought's encoder), or None."""
  try:
    how = method(family, config)
  except ValueError as e:
    if not getattr(models.get(family), "NO_SENTENCE_SCORE", ""):
      raise
    return str(e)
  params = nn.meta.unbox(params)
  row = jnp.full((1, 8), min(7, config.vocab_size - 1), jnp.int32)
  at = jnp.zeros((1,), jnp.int32)
  sp = objectives.Specials(vocab_size=config.vocab_size)
  try:
    jax.eval_shape(lambda p: score_one(family, config, p, row, at, sp),
                   params)
  except flax.errors.ScopeParamNotFoundError as e:
    return (f"{family} params lack the layer its {how} scoring reads "
            f"({str(e).split('(')[0].strip()})")
  return None


def score_one(family, config, params, rows, at, specials, how=None):
  """float32 [C]: the scores of rows [C,T], whole rows or (per-piece
  methods) the one piece at `at` [C] corrupted in each; `how` defaults to
  the family's `method`."""
  how = how or method(family, config)
  if how == "permutation_l2r":
    return _l2r_scores(family, config, params, rows, specials)
  if how in ("prefix", "deshuffle"):
    return _encdec_row_scores(family, config, how, params, rows, specials)
  if how in _WHOLE_ROW:
    return _row_scores(family, config, params, rows)
  fill = specials.sentinel(0) if how == "sentinel" else specials.mask
  return _masked_scores(family, config, how, params, rows, at, fill)


def score(family: str, config, params, tokens: np.ndarray, specials,
          how: str | None = None) -> np.ndarray:
  """Each row's log-likelihood by the family's natural scoring.

  Args:
    family: model family name.
    config: the family's `Config`.
    params: the model's params (boxed or not).
    tokens: int32 [B,T] ids, right-padded with config.pad_id.
    specials: `tokenizer.specials()` (a dict) or an `objectives.Specials`.
    how: the scoring `method` (an encoder-decoder's depends on its
      pre-training scheme: `method(family, config, objective)`); None: the
      family's default.

  Returns:
    float32 [B]: summed log-probabilities (natural log), see `method`.

  Raises:
    ValueError: the family has no natural score, or `how` is not one of
      its methods.
  """
  default = method(family, config)
  how = how or default
  if how != default and not (default in ENCDEC_METHODS
                             and how in ENCDEC_METHODS):
    raise ValueError(f"{family} is scored by {default!r}, not {how!r}")
  params = nn.meta.unbox(params)
  tokens = _pad_length(np.asarray(tokens, np.int32), config)
  b, t = tokens.shape
  sp = _specials(config, specials)
  if how in _WHOLE_ROW:
    fn = lambda rows: score_one(family, config, params, jnp.asarray(rows),
                                None, sp, how)
    return _chunked(fn, (tokens,), b, t)
  rows, at = np.nonzero(scored_pieces(tokens, config, sp))
  fn = lambda r, a: score_one(family, config, params, jnp.asarray(tokens[r]),
                              jnp.asarray(a), sp, how)
  per_piece = _chunked(fn, (rows, at), len(rows), t)
  return np.bincount(rows, per_piece, minlength=b).astype(np.float32)


def scored_pieces(tokens: np.ndarray, config, specials) -> np.ndarray:
  """bool [B,T]: the pieces a per-piece scoring scores (one model row
  each): real, not padding, and eligible for corruption."""
  sp = _specials(config, specials)
  return (tokens != config.pad_id) & np.asarray(noise.eligible(tokens, sp))


def _specials(config, specials) -> objectives.Specials:
  if isinstance(specials, objectives.Specials):
    return specials
  return objectives.Specials(**{"vocab_size": config.vocab_size,
                                **specials})


def _pad_length(tokens: np.ndarray, config) -> np.ndarray:
  """tokens [B,T] padded to a multiple of 8 (within config.max_len), so
  rows of nearby lengths share one compiled program."""
  t = tokens.shape[1]
  want = -(-t // 8) * 8
  limit = getattr(config, "max_len", None)
  if limit:
    want = max(t, min(want, limit))
  return np.pad(tokens, ((0, 0), (0, want - t)),
                constant_values=config.pad_id)


def _chunked(fn, arrays, n: int, length: int) -> np.ndarray:
  """float32 [n]: fn over chunks of the leading axis of `arrays`.

  Chunks hold C = min(CHUNK_TOKENS // length, next power of 2 >= n) items
  (few distinct shapes to compile); the last is filled with item 0 and its
  extra outputs dropped.
  """
  size = min(max(1, CHUNK_TOKENS // length), 1 << max(n - 1, 0).bit_length())
  out = []
  for start in range(0, n, size):
    idx = np.arange(start, start + size)
    idx[idx >= n] = 0
    out.append(np.asarray(fn(*(a[idx] for a in arrays)), np.float32))
  return np.concatenate(out)[:n] if out else np.zeros(0, np.float32)


def _feed(tokens, pad_id: int):
  """tokens with padding mapped to a valid id (a pad_id of -1 means none)."""
  return jnp.where(tokens == pad_id, max(pad_id, 0), tokens)


def _token_logprobs(logits, targets):
  """log softmax(logits)[..., targets]: [..., V], [...] -> [...] float32."""
  logits = logits.astype(jnp.float32)
  true = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
  return true - jax.nn.logsumexp(logits, axis=-1)


@functools.partial(jax.jit, static_argnames=("family", "config"))
def _row_scores(family, config, params, tokens):
  """float32 [C]: causal, biLM or discriminator scores of tokens [C,T]."""
  how = method(family, config)
  model = models.get(family).Model(config)
  real = tokens != config.pad_id
  feed = _feed(tokens, config.pad_id)
  out = model.apply({"params": params}, feed,
                    segment_ids=real.astype(jnp.int32))
  nxt = real[:, 1:]
  if how == "discriminator":
    return jnp.where(real, jax.nn.log_sigmoid(-out["logits"]), 0.0).sum(1)
  if how == "causal":
    lp = _token_logprobs(out["logits"][:, :-1], feed[:, 1:])
    return jnp.where(nxt, lp, 0.0).sum(1)
  fwd = _token_logprobs(out["forward_logits"][:, :-1], feed[:, 1:])
  bwd = _token_logprobs(out["backward_logits"][:, 1:], feed[:, :-1])
  return jnp.where(nxt, fwd + bwd, 0.0).sum(1)


@functools.partial(jax.jit, static_argnames=("family", "config",
                                             "specials"))
def _l2r_scores(family, config, params, tokens, specials):
  """float32 [C]: "permutation_l2r" scores of tokens [C,T] (one pass)."""
  model = models.get(family).Model(config)
  real = tokens != config.pad_id
  feed = _feed(tokens, config.pad_id)
  t = tokens.shape[1]
  later = jnp.arange(t)[None, :] >= jnp.arange(t)[:, None]  # [i, j]: j >= i
  perm_mask = jnp.broadcast_to(later, tokens.shape + (t,))
  mapping = jnp.broadcast_to(jnp.eye(t, dtype=jnp.float32),
                             tokens.shape + (t,))
  out = model.apply({"params": params}, feed,
                    segment_ids=real.astype(jnp.int32), perm_mask=perm_mask,
                    target_mapping=mapping)
  lp = _token_logprobs(out["logits"], feed)
  scored = real & noise.eligible(tokens, specials) & (jnp.arange(t) >= 1)
  return jnp.where(scored, lp, 0.0).sum(1)


@functools.partial(jax.jit, static_argnames=("family", "config", "how"))
def _masked_scores(family, config, how, params, rows, at, fill):
  """float32 [C]: log p(rows[i, at[i]]) with that piece corrupted by `how`.

  Args:
    rows: int32 [C,T] original rows. at: int32 [C] the corrupted position.
    fill: int32 scalar, the mask or sentinel id put there.
  """
  i = jnp.arange(rows.shape[0])
  target = rows[i, at]
  seg = (rows != config.pad_id).astype(jnp.int32)
  enc = _feed(rows.at[i, at].set(fill), config.pad_id)
  model = models.get(family).Model(config)
  variables = {"params": params}
  if how == "pll":
    if family in _LOGITS_AT:
      logits = model.apply(variables, enc, segment_ids=seg,
                           logits_at=at[:, None])["logits"][:, 0]
    else:
      logits = model.apply(variables, enc, segment_ids=seg)["logits"][i, at]
    return _token_logprobs(logits, target)
  start = jnp.full_like(at, encdec.decoder_start(config))[:, None]
  if how == "sentinel":  # decoder `start <s0>`, x_t predicted after <s0>
    dec = jnp.concatenate([start, jnp.full_like(start, fill)], 1)
    logits = model.apply(variables, enc, dec, enc_segment_ids=seg)[
        "logits"][:, 1]
  elif how == "dropped":  # x_t removed; predicted first, after `start`
    kept = transforms.drop_noise_tokens(
        _feed(rows, config.pad_id), jax.nn.one_hot(at, rows.shape[1]) > 0,
        seg, rows.shape[1])
    logits = model.apply(variables, kept["tokens"], start,
                         enc_segment_ids=kept["segment_ids"],
                         enc_positions=kept["positions"])["logits"][:, 0]
  else:  # "infill": the original row teacher-forced, read at t
    dec = jnp.concatenate([start, _feed(rows, config.pad_id)[:, :-1]], 1)
    logits = model.apply(variables, enc, dec, at, seg,
                         method=_decoder_logits_at)
  return _token_logprobs(logits, target)


@functools.partial(jax.jit, static_argnames=("family", "config", "how",
                                             "specials"))
def _encdec_row_scores(family, config, how, params, tokens, specials):
  """float32 [C]: "prefix" or "deshuffle" scores of tokens [C,T] (one
  teacher-forced pass a row, built by the schemes' own transforms)."""
  length = tokens.shape[1]
  doc = (tokens != config.pad_id).astype(jnp.int32)
  batch = {"tokens": _feed(tokens, config.pad_id), "doc_ids": doc}
  if how == "prefix":  # x_0 in, x_1 .. EOS out
    later = noise.eligible(tokens, specials) & (jnp.arange(length) >= 1)
    mask = later & (doc > 0)
    enc = transforms.drop_noise_tokens(batch["tokens"], mask, doc, length)
    dec = transforms.keep_noise_tokens(batch["tokens"], mask, doc, specials,
                                       length)
  else:
    enc = encdec.original(fixed_shuffle(batch, specials), length)
    dec = encdec.original(batch, length)
  args, kw = encdec.encdec_inputs(config, enc, dec)
  logits = models.get(family).Model(config).apply({"params": params}, *args,
                                                  **kw)["logits"]
  lp = _token_logprobs(logits, dec["tokens"])
  return jnp.where(dec["segment_ids"] > 0, lp, 0.0).sum(1)


def fixed_shuffle(batch, specials):
  """"deshuffle"'s encoder input: each row's pieces (one document a row)
  in a fixed pseudo-random order that depends only on how many real pieces
  the row has, EOS last (`transforms.shuffle_tokens` with hashed keys).

  Args:
    batch: "tokens" and "doc_ids" [C,T] int32 (doc_ids 0 on padding).
    specials: `objectives.Specials`.

  Returns:
    the shuffled batch dict.
  """
  doc = batch["doc_ids"]
  count = (doc > 0).sum(1, keepdims=True).astype(jnp.uint32)
  index = jnp.arange(doc.shape[1], dtype=jnp.uint32)[None]
  keys = _hash_uniform(index + count * jnp.uint32(0x9E3779B9))
  return transforms.shuffle_tokens(None, batch, specials, keys)


def _hash_uniform(x):
  """uint32 [...] -> float32 [...] in [0, 1): a fixed integer hash (the
  murmur3 finaliser), the same on every backend and for any padding."""
  x = x ^ (x >> 16)
  x = x * jnp.uint32(0x85EBCA6B)
  x = x ^ (x >> 13)
  x = x * jnp.uint32(0xC2B2AE35)
  x = x ^ (x >> 16)
  return (x >> 8).astype(jnp.float32) * (1.0 / (1 << 24))


def _decoder_logits_at(module, enc, dec, at, seg):
  """BART: [C,V] decoder logits at positions at [C] only (the unused
  all-position logits of `decode` are dropped by the compiler)."""
  hidden = module.encode(enc, enc_segment_ids=seg)["encoder_hidden"]
  h = module.decode(dec, hidden, enc_segment_ids=seg)["hidden"]
  h = jnp.take_along_axis(h, at[:, None, None], axis=1)  # [C,1,D]
  return module.lm_logits(h)[:, 0]
