"""Grover's articles one at a time: laid out, scored and continued as the
`grover` scheme lays them out in training (`objectives.fields`).

    rows = [grover.article_row(tok, a) for a in articles]  # as read in rows
    laid = grover.layout(rows, (CONTEXT, CONTEXT, TARGET))  # topic, headline
    nll, n = grover.field_nll(params, laid["tokens"], laid["field_ids"],
                              family="gpt2", config=cfg, field=grover.BODY)
    bodies = grover.write_field(loaded, grover.prompts(rows, groups, BODY),
                                BODY, jax.random.key(0), top_p=0.9)

An article is a row of the loader's (`data.annotate.annotate_fields`, each
field in its begin and end markers, `data.articles.markers`, closed by eos),
and a layout is the scheme's own (`fields.arrange` of the groups each field
drew), so what is scored or prompted here is a row the model trained on.

Letters: N articles, T length, P prompt length, G generated length, V vocab.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from data import annotate
from data import articles
from data import packing
from objectives import fields
from objectives import lm
from zoo import generate
from zoo import models

TOPIC, HEADLINE, BODY = (articles.FIELDS.index(f) + 1
                         for f in ("topic", "headline", "body"))
CONTEXT, TARGET, DROPPED = fields.CONTEXT, fields.TARGET, fields.DROPPED


def article_row(tokenizer, article: dict) -> dict[str, np.ndarray]:
  """One article as the loader reads it (`data.source = "articles"`).

  Args:
    tokenizer: the zoo tokenizer the model was trained with.
    article: a dict with the fields of `data.articles.FIELDS` (text).

  Returns:
    "tokens" and "field_ids", int32 [T]: each field in its markers, in
    canonical order, then eos (field id 0).
  """
  text, _ = annotate.clean(articles.text_of(article))
  specials = tokenizer.specials()
  doc = annotate.annotate_fields(tokenizer, text, articles.markers(specials))
  doc = packing.close_document(doc, specials["eos"])
  return {"tokens": doc["tokens"], "field_ids": doc["field_ids"]}


def _padded(rows: list[dict]) -> tuple[np.ndarray, np.ndarray]:
  """tokens, field_ids int32 [N, T] of the rows, right-padded with 0."""
  width = max(len(r["tokens"]) for r in rows)
  out = np.zeros((2, len(rows), width), np.int32)
  for i, r in enumerate(rows):
    out[0, i, :len(r["tokens"])] = r["tokens"]
    out[1, i, :len(r["tokens"])] = r["field_ids"]
  return out[0], out[1]


def layout(rows: list[dict], groups, length: int | None = None
           ) -> dict[str, np.ndarray]:
  """Each article laid out as the scheme lays out a document whose fields
  drew `groups` (`fields.arrange`: context fields, then target fields,
  each group in canonical order, eos last; dropped fields removed).

  Args:
    rows: N `article_row`s (or any rows of "tokens", "field_ids" [T_i]).
    groups: one of CONTEXT, TARGET, DROPPED per field, in field-id order.
    length: T, the rows cut or padded to it (None: the longest kept).

  Returns:
    "tokens", "field_ids" int32 [N, T], padding 0.
  """
  tokens, field_ids = _padded(rows)
  per_field = np.asarray([TARGET, *groups], np.int32)  # field 0: eos
  if field_ids.max() >= len(per_field):
    raise ValueError(f"{len(groups)} groups for field ids up to "
                     f"{field_ids.max()}")
  seg = (np.arange(tokens.shape[1])[None]
         < np.asarray([len(r["tokens"]) for r in rows])[:, None])
  keep, _, fid, tok = fields.arrange(
      jnp.asarray(per_field[field_ids]), jnp.asarray(seg, jnp.int32),
      jnp.asarray(field_ids), jnp.asarray(tokens))
  keep = np.asarray(keep)
  tok, fid = np.where(keep, tok, 0), np.where(keep, fid, 0)
  length = length or int(keep.sum(1).max())
  pad = max(0, length - tok.shape[1])
  return {k: np.pad(v, ((0, 0), (0, pad)))[:, :length].astype(np.int32)
          for k, v in (("tokens", tok), ("field_ids", fid))}


@functools.partial(jax.jit, static_argnames=("family", "config", "field"))
def field_nll(params, tokens, field_ids, *, family: str, config,
              field: int):
  """Next-token negative log-likelihood of one field's pieces.

  Each row is one document (padding 0), read as the scheme's model reads
  it (`lm.doc_inputs`: positions from 0). Scored: every piece of `field`
  after its begin marker (its end marker too, where the row holds it),
  each predicted from everything before it; the begin marker itself is
  not, so a field that opens the row and one that follows others count
  the same pieces.

  Args:
    params: a decoder's params (unboxed).
    tokens, field_ids: int32 [N, T] (`layout`).
    family, config: the decoder (static, as is `field`).
    field: the field id scored.

  Returns:
    (float32 [N] summed nats, float32 [N] pieces scored).
  """
  seg = (tokens != config.pad_id).astype(jnp.int32)
  out = models.get(family).Model(config).apply(
      {"params": params}, tokens, **lm.doc_inputs({"doc_ids": seg}))
  logp = jax.nn.log_softmax(out["logits"].astype(jnp.float32), axis=-1)
  nxt = jnp.concatenate([tokens[:, 1:], jnp.zeros_like(tokens[:, :1])], 1)
  nxt_field = jnp.concatenate([field_ids[:, 1:],
                               jnp.zeros_like(field_ids[:, :1])], 1)
  weight = ((field_ids == field) & (nxt_field == field)).astype(jnp.float32)
  nll = -jnp.take_along_axis(logp, nxt[..., None], axis=-1)[..., 0]
  return (nll * weight).sum(1), weight.sum(1)


def prompts(rows: list[dict], groups, field: int) -> list[list[int]]:
  """Each article laid out by `groups` and cut after `field`'s begin
  marker: the ids a model continues to write that field (put it in a
  TARGET group, or its begin marker may come before the context)."""
  laid = layout(rows, groups)
  out = []
  for tok, fid in zip(laid["tokens"], laid["field_ids"]):
    at = np.flatnonzero(fid == field)
    if not len(at):
      raise ValueError(f"field {field} is dropped by groups {groups}")
    out.append(tok[:at[0] + 1].tolist())
  return out


def left_pad(rows: list[list[int]], length: int, pad_id: int) -> np.ndarray:
  """int32 [N, P=length]: each row at the right end, `pad_id` before."""
  out = np.full((len(rows), length), pad_id, np.int32)
  for i, r in enumerate(rows):
    out[i, length - len(r):] = r
  return out


def write_field(loaded, prompt_ids: list[list[int]], field: int, rng, *,
                max_len: int = 128, top_k: int = 0, top_p: float = 0.9,
                temperature: float = 1.0, batch_size: int = 32
                ) -> list[list[int]]:
  """Sampled pieces of `field` after each prompt (`prompts`), cut before
  the field's end marker or eos.

  Args:
    loaded: a `zoo.load` decoder with its tokenizer.
    prompt_ids: N prompts, each ending in the field's begin marker.
    field: the field id written.
    rng: a jax key; batch j samples with `fold_in(rng, j)`.
    max_len: G, the most pieces written per article.
    top_k, top_p, temperature: the sampling (`generate.sample_decoder`).
    batch_size: prompts a call (all padded to the longest prompt, so one
      program serves every batch).

  Returns:
    N lists of ids (at most G each).
  """
  specials = loaded.tokenizer.specials()
  end = articles.markers(specials)[field - 1][1]
  width = max(len(p) for p in prompt_ids)
  table = getattr(loaded.config, "max_len", None)
  if table is not None and width + max_len > table:
    raise ValueError(f"prompts of {width} and {max_len} written pieces "
                     f"exceed the position table ({table})")
  pad = loaded.config.pad_id
  out = []
  for j, start in enumerate(range(0, len(prompt_ids), batch_size)):
    chunk = prompt_ids[start:start + batch_size]
    chunk = chunk + [chunk[-1]] * (batch_size - len(chunk))  # one shape
    ids = generate.sample_decoder(
        loaded.params, left_pad(chunk, width, pad), jax.random.fold_in(rng, j),
        family=loaded.family, config=loaded.config, max_len=max_len,
        eos_id=end, top_k=top_k, top_p=top_p, temperature=temperature)
    for row in generate.trim(ids, end)[:len(prompt_ids) - start]:
      out.append(row[:row.index(specials["eos"])]
                 if specials["eos"] in row else row)
  return out
