"""Greedy decoding, sampling and beam search for encoder-decoders and
decoders.

Static shapes throughout: the output buffer has a fixed length, every step
runs the decoder over the whole buffer (causal attention makes the unwritten
tail invisible to the position being predicted), and a `lax.while_loop`
stops as soon as every row has produced eos. No KV cache: each step costs a
full decoder pass, which is what keeps the code short and exact.

Decoder prompts are left-padded, so every row continues at the same index;
their positions are shifted so the first real id sits at position 0, as in
right-padded training rows.

Letters: B batch, K beams, S encoder length, P prompt length, G generated
length, V vocab.
"""

import functools

import jax
import jax.numpy as jnp

from zoo import models

Array = jax.Array


def _model(family: str, config):
  return models.get(family).Model(config)


def _argmax(logits: Array, i) -> Array:
  """The greedy pick of [B,V] logits at step i: int [B]."""
  del i
  return jnp.argmax(logits, axis=-1)


def _greedy_loop(next_logits, batch: int, length: int, eos_id: int,
                 pad_id: int, first: Array, pick=_argmax) -> Array:
  """Runs `next_logits(buffer, i) -> [B,V]` until eos or `length` ids.

  `buffer` is int32 [B,length] holding `first` at 0 and ids so far; it
  returns the ids (pad after each row's eos). `pick(logits [B,V], i)`
  chooses each row's next id (default: the argmax).
  """
  buf = jnp.full((batch, length), pad_id, jnp.int32).at[:, 0].set(first)
  done = jnp.zeros((batch,), bool)

  def cond(carry):
    i, _, done = carry
    return (i < length - 1) & ~jnp.all(done)

  def body(carry):
    i, buf, done = carry
    nxt = pick(next_logits(buf, i), i).astype(jnp.int32)
    nxt = jnp.where(done, pad_id, nxt)
    buf = jax.lax.dynamic_update_slice(buf, nxt[:, None], (0, i + 1))
    return i + 1, buf, done | (nxt == eos_id)

  _, buf, _ = jax.lax.while_loop(cond, body, (0, buf, done))
  return buf


@functools.partial(jax.jit, static_argnames=(
    "family", "config", "max_len"))
def greedy_encdec(params, enc_tokens: Array, *, family: str, config,
                  max_len: int, start_id: int, eos_id: int) -> Array:
  """Greedy targets of an encoder-decoder.

  Args:
    params: the model's params (unboxed).
    enc_tokens: int32 [B,S], padded with `config.pad_id`.
    family, config: the model (static, as is max_len).
    max_len: G, generated ids per row (eos included).
    start_id: the decoder start id (T5: pad; BART: `decoder_start_id`).
    eos_id: ends a row; later ids are pad.

  Returns:
    int32 [B,G]: the generated ids (no start id).
  """
  model = _model(family, config)
  variables = {"params": params}
  enc_seg = (enc_tokens != config.pad_id).astype(jnp.int32)
  encoded = model.apply(variables, enc_tokens, enc_segment_ids=enc_seg,
                        method="encode")["encoder_hidden"]

  def next_logits(buf, i):
    logits = model.apply(variables, buf[:, :-1], encoded,
                         enc_segment_ids=enc_seg, method="decode")["logits"]
    return jax.lax.dynamic_index_in_dim(logits, i, 1, keepdims=False)

  buf = _greedy_loop(next_logits, enc_tokens.shape[0], max_len + 1, eos_id,
                     config.pad_id, jnp.asarray(start_id, jnp.int32))
  return buf[:, 1:]


def prompt_layout(prompt: Array, pad_id: int, total: int):
  """Segment ids and positions of a left-padded prompt grown to `total`.

  Args:
    prompt: int32 [B,P], left-padded with `pad_id`.
    pad_id: the padding id.
    total: P + G.

  Returns:
    (segment_ids int32 [B,P+G]: 0 on the left padding, 1 after;
    positions int32 [B,P+G]: 0 at each row's first real id).
  """
  b, p = prompt.shape
  n_pad = jnp.sum(jnp.cumprod(prompt == pad_id, axis=1), axis=1)
  idx = jnp.arange(total, dtype=jnp.int32)[None, :]
  seg = (idx >= n_pad[:, None]).astype(jnp.int32)
  pos = jnp.maximum(idx - n_pad[:, None], 0).astype(jnp.int32)
  del b, p
  return seg, pos


def _continue_decoder(params, prompt: Array, family: str, config,
                      max_len: int, eos_id: int, pick) -> Array:
  """int32 [B,G]: left-padded prompts [B,P] continued by a decoder,
  each next id chosen by `pick(logits [B,V], i)` (`_greedy_loop`)."""
  model = _model(family, config)
  b, p = prompt.shape
  seg, pos = prompt_layout(prompt, config.pad_id, p + max_len)

  def next_logits(buf, i):
    tokens = jnp.concatenate([prompt, buf[:, 1:]], axis=1)
    logits = model.apply({"params": params}, tokens, segment_ids=seg,
                         positions=pos)["logits"]
    return jax.lax.dynamic_index_in_dim(logits, p - 1 + i, 1, keepdims=False)

  # Slot 0 of the loop buffer stands for the prompt's last id.
  buf = _greedy_loop(next_logits, b, max_len + 1, eos_id, config.pad_id,
                     prompt[:, -1], pick)
  return buf[:, 1:]


@functools.partial(jax.jit, static_argnames=(
    "family", "config", "max_len"))
def greedy_decoder(params, prompt: Array, *, family: str, config,
                   max_len: int, eos_id: int) -> Array:
  """Greedy continuation of left-padded prompts by a decoder.

  Args:
    params: the model's params (unboxed).
    prompt: int32 [B,P], left-padded with `config.pad_id`, ending in the
      separator the model was fine-tuned with.
    family, config: the model (static).
    max_len: G, generated ids per row (eos included).
    eos_id: ends a row; later ids are pad.

  Returns:
    int32 [B,G]: the generated ids.
  """
  return _continue_decoder(params, prompt, family, config, max_len, eos_id,
                           _argmax)


def filter_logits(logits: Array, top_k: int = 0, top_p: float = 1.0
                  ) -> Array:
  """[B,V] float32 logits with every id outside the sampling set at -inf.

  The set is the `top_k` most likely ids (0: all), then of those the
  smallest most-likely-first prefix whose probability reaches `top_p`
  (nucleus sampling, Holtzman et al. 2020; 1.0: all); the most likely id
  always stays.
  """
  logits = logits.astype(jnp.float32)
  if top_k:
    kth = jax.lax.top_k(logits, top_k)[0][:, -1:]
    logits = jnp.where(logits < kth, -jnp.inf, logits)
  if top_p < 1.0:
    desc = -jnp.sort(-logits, axis=-1)
    probs = jax.nn.softmax(desc, axis=-1)
    before = jnp.cumsum(probs, axis=-1) - probs  # mass of the likelier ids
    cut = jnp.min(jnp.where(before < top_p, desc, jnp.inf), axis=-1,
                  keepdims=True)
    logits = jnp.where(logits < cut, -jnp.inf, logits)
  return logits


@functools.partial(jax.jit, static_argnames=(
    "family", "config", "max_len", "top_k", "top_p"))
def sample_decoder(params, prompt: Array, rng, *, family: str, config,
                   max_len: int, eos_id: int, top_k: int = 0,
                   top_p: float = 1.0, temperature: float = 1.0) -> Array:
  """Sampled continuation of left-padded prompts by a decoder.

  Args:
    params, prompt, family, config, max_len, eos_id: as `greedy_decoder`.
    rng: a jax key; step i samples with `fold_in(rng, i)`, so a key and a
      prompt batch give the same ids every time.
    top_k, top_p: the sampling set (`filter_logits`; static).
    temperature: logits are divided by it before filtering.

  Returns:
    int32 [B,G]: the sampled ids.
  """
  def pick(logits, i):
    kept = filter_logits(logits / temperature, top_k, top_p)
    return jax.random.categorical(jax.random.fold_in(rng, i), kept, axis=-1)

  return _continue_decoder(params, prompt, family, config, max_len, eos_id,
                           pick)


def _beam_step(scores, ids, done, logp, i, eos_id, pad_id):
  """One beam step: [B,K] scores, [B,K,G] ids, [B,K,V] log-probs at step i."""
  b, k, v = logp.shape
  # A finished beam extends only by pad, at no cost.
  stay = jnp.full((v,), -jnp.inf).at[pad_id].set(0.0)
  logp = jnp.where(done[..., None], stay, logp)
  total = (scores[..., None] + logp).reshape(b, k * v)
  top, flat = jax.lax.top_k(total, k)
  parent, token = flat // v, (flat % v).astype(jnp.int32)
  ids = jnp.take_along_axis(ids, parent[..., None], axis=1)
  ids = jax.lax.dynamic_update_slice(ids, token[..., None], (0, 0, i))
  done = jnp.take_along_axis(done, parent, axis=1) | (token == eos_id)
  return top, ids, done


@functools.partial(jax.jit, static_argnames=(
    "family", "config", "max_len", "beams"))
def beam_encdec(params, enc_tokens: Array, *, family: str, config,
                max_len: int, start_id: int, eos_id: int,
                beams: int = 4) -> Array:
  """Beam search of an encoder-decoder: the best of `beams` by sum log-prob.

  Args:
    params, enc_tokens, family, config, max_len, start_id, eos_id: as in
      `greedy_encdec`.
    beams: K.

  Returns:
    int32 [B,G]: the highest-scoring beam of each row.
  """
  model = _model(family, config)
  variables = {"params": params}
  b = enc_tokens.shape[0]
  enc = jnp.repeat(enc_tokens, beams, axis=0)
  enc_seg = (enc != config.pad_id).astype(jnp.int32)
  encoded = model.apply(variables, enc, enc_segment_ids=enc_seg,
                        method="encode")["encoder_hidden"]
  # Beams start identical: only beam 0 is live, so step 0 picks K tokens.
  scores = jnp.tile(jnp.array([0.0] + [-jnp.inf] * (beams - 1)), (b, 1))
  ids = jnp.full((b, beams, max_len), config.pad_id, jnp.int32)
  done = jnp.zeros((b, beams), bool)

  def body(i, carry):
    scores, ids, done = carry
    first = jnp.full((b, beams, 1), start_id, jnp.int32)
    dec = jnp.concatenate([first,
                           ids[..., :-1]], axis=-1).reshape(b * beams, -1)
    logits = model.apply(variables, dec, encoded, enc_segment_ids=enc_seg,
                         method="decode")["logits"]
    logp = jax.nn.log_softmax(
        jax.lax.dynamic_index_in_dim(logits, i, 1, keepdims=False))
    return _beam_step(scores, ids, done, logp.reshape(b, beams, -1), i,
                      eos_id, config.pad_id)

  scores, ids, _ = jax.lax.fori_loop(0, max_len, body, (scores, ids, done))
  best = jnp.argmax(scores, axis=1)
  return jnp.take_along_axis(ids, best[:, None, None], axis=1)[:, 0]


def trim(ids, eos_id: int) -> list[list[int]]:
  """Generated rows as lists, cut before the first eos (host side)."""
  out = []
  for row in jax.device_get(ids).tolist():
    out.append(row[:row.index(eos_id)] if eos_id in row else row)
  return out
