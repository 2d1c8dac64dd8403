"""Grover's layout of an article's fields, inside jit.

Zellers et al. 2019 ("Defending against neural fake news") train one
language model over an article's fields (for the BBC sample: topic,
headline, body) so that any field can be generated from the others. Each
document of a row is re-laid out before the loss, from the step's rng:

- `rule="paper"`: with probability `body_only` (0.35) only the body is
  kept (unconditional generation); otherwise each other field is dropped
  with probability `drop` (0.1), and every kept field goes to the
  context or the target at random.
- `rule="release"` (the released data preparation): with probability 0.35
  the body comes first and each other field follows, kept with
  probability 1 - `drop`; with probability 0.15 every field is context;
  otherwise each field is dropped with probability `drop` (never the body
  or the headline) or goes to the context or the target at random.

The context fields come first, then the target fields, each group in the
canonical order (field id 1, 2, ...). Tokens of a document outside any
field (its closing eos, field id 0) stay last. Dropped fields leave the
row, which closes up; the freed slots at its end are padding.

Rows carry `field_ids` [B, T] int32: 0 outside fields and on padding,
1..F the canonical field of each token (the body is `body`). A document's
fields are contiguous, each wrapped in its own begin and end markers by
the data pipeline, so a moved field moves with its markers.

Letters: B batch, T length.
"""

import jax
import jax.numpy as jnp

from objectives import transforms

RULES = ("paper", "release")
DROPPED, CONTEXT, TARGET = -1, 0, 1


def _per_document(rng, segment_ids, slots: int = 1):
  """Uniform draws shared by each document's tokens: [B, T] (or [B, T, S]
  for `slots` S > 1, one per field slot)."""
  b, t = segment_ids.shape
  draws = jax.random.uniform(rng, (b, t + 1, slots))
  out = jnp.take_along_axis(draws, segment_ids[..., None], axis=1)
  return out[..., 0] if slots == 1 else out


def chunks(rng, segment_ids, field_ids, *, body: int, title: int,
           num_fields: int, rule: str = "paper", drop: float = 0.1,
           body_only: float = 0.35) -> jax.Array:
  """Each token's group: CONTEXT, TARGET or DROPPED, [B, T] int32.

  `body` and `title` are field ids (the release never drops either in
  its random partition). Every token of one field of one document gets
  the same group. Tokens outside fields (field id 0) are TARGET: they
  close their document.
  """
  if rule not in RULES:
    raise ValueError(f"field layout rule {rule!r} is not one of {RULES}")
  k_case, k_drop, k_side = jax.random.split(rng, 3)
  case = _per_document(k_case, segment_ids)
  f = jnp.clip(field_ids, 0, num_fields)[..., None]
  pick = lambda u: jnp.take_along_axis(u, f, axis=-1)[..., 0]
  dropped = pick(_per_document(k_drop, segment_ids, num_fields + 1)) < drop
  side = jnp.where(pick(_per_document(k_side, segment_ids, num_fields + 1))
                   < 0.5, CONTEXT, TARGET)
  is_body = field_ids == body
  if rule == "paper":
    out = jnp.where(dropped & ~is_body, DROPPED, side)
    out = jnp.where(case < body_only, jnp.where(is_body, TARGET, DROPPED),
                    out)
  else:
    kept_rest = jnp.where(dropped, DROPPED, TARGET)
    first = jnp.where(is_body, CONTEXT, kept_rest)
    free = jnp.where(dropped & ~is_body & (field_ids != title), DROPPED,
                     side)
    out = jnp.where(case < body_only, first,
                    jnp.where(case < 0.5, CONTEXT, free))
  return jnp.where(field_ids > 0, out, TARGET).astype(jnp.int32)


def arrange(group, segment_ids, field_ids, *arrays):
  """Each document's kept tokens, context fields then target fields, each
  in canonical order; dropped tokens and padding at the row's end.

  Args:
    group: [B, T] int32 from `chunks`.
    segment_ids, field_ids: [B, T] int32.
    *arrays: more [B, T] arrays to move the same way (tokens, ...).

  Returns:
    (keep [B, T] bool, segment_ids, field_ids, *arrays) rearranged; keep
    is False on the freed slots (their values are meaningless: mask them).
  """
  num = jnp.max(field_ids) + 2  # field ranks, with 0 (outside) last
  rank = jnp.where(field_ids > 0, field_ids, num - 1)
  keep = (group != DROPPED) & (segment_ids > 0)
  key = (group * num + rank).astype(jnp.float32)
  order = transforms.sort_within_docs(jnp.where(keep, segment_ids, 0), key)
  moved = transforms.gather_rows(dict(enumerate(
      (keep, segment_ids, field_ids, *arrays))), order)
  kept = moved[0]
  return (kept, jnp.where(kept, moved[1], 0), jnp.where(kept, moved[2], 0),
          *(moved[i] for i in range(3, len(moved))))
