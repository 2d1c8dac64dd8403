"""Grover's field layout: which group each field joins, and the order."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from objectives import fields

TOPIC, TITLE, BODY = 1, 2, 3


def test_arrange_puts_context_then_target_in_canonical_order():
  # Two documents: [topic topic title body body eos] and [title body eos].
  seg = jnp.array([[1, 1, 1, 1, 1, 1, 2, 2, 2, 0]])
  fid = jnp.array([[1, 1, 2, 3, 3, 0, 2, 3, 0, 0]])
  tok = jnp.array([[10, 11, 20, 30, 31, 1, 40, 50, 1, 0]])
  C, T, D = fields.CONTEXT, fields.TARGET, fields.DROPPED
  # Doc 1: body is context, topic target, title dropped. Doc 2: all target.
  group = jnp.array([[T, T, D, C, C, T, T, T, T, T]])
  keep, s, f, t = fields.arrange(group, seg, fid, tok)
  n = int(keep.sum())
  assert n == 8 and not keep[0, n:].any()
  assert t[0, :n].tolist() == [30, 31, 10, 11, 1, 40, 50, 1]
  assert s[0, :n].tolist() == [1, 1, 1, 1, 1, 2, 2, 2]
  assert f[0, :n].tolist() == [3, 3, 1, 1, 0, 2, 3, 0]
  assert not s[0, n:].any() and not f[0, n:].any()


def _many(rule, docs=4000):
  """`docs` one-row documents of [topic, title, body, body, eos]."""
  fid = jnp.tile(jnp.array([[1, 2, 3, 3, 0]]), (docs, 1))
  seg = jnp.ones_like(fid)
  group = fields.chunks(jax.random.key(0), seg, fid, body=BODY, title=TITLE,
                        num_fields=3, rule=rule)
  return np.asarray(group)


@pytest.mark.parametrize("rule", fields.RULES)
def test_a_field_joins_one_group_whole(rule):
  g = _many(rule)
  assert (g[:, 2] == g[:, 3]).all()  # the body's two tokens
  assert (g[:, 4] == fields.TARGET).all()  # the closing eos


def test_paper_rule_drops_all_but_the_body_at_035_else_each_field_at_01():
  g = _many("paper")
  C, T, D = fields.CONTEXT, fields.TARGET, fields.DROPPED
  body_only = (g[:, 0] == D) & (g[:, 1] == D) & (g[:, 2] == T)
  assert abs(body_only.mean() - (0.35 + 0.65 * 0.1 * 0.1 * 0.5)) < 0.03
  rest = ~body_only
  assert (g[:, 2] != D).all()  # the body is never dropped
  assert abs((g[rest, 0] == D).mean() - 0.1) < 0.02
  assert abs((g[rest, 2] == C).mean() - 0.5) < 0.03


def test_release_rule_follows_its_three_cases():
  g = _many("release")
  C, T, D = fields.CONTEXT, fields.TARGET, fields.DROPPED
  body_first = (g[:, 2] == C) & (g[:, 0] != C) & (g[:, 1] != C)
  all_context = (g[:, :4] == C).all(1)
  # Case two, or case three with every field kept and drawn to context.
  assert abs(all_context.mean() - (0.15 + 0.5 * 0.9 * 0.5 ** 3)) < 0.02
  assert body_first.mean() > 0.35
  # The title is dropped only in case one, where the body comes first.
  assert abs((g[:, 1] == D).mean() - 0.35 * 0.1) < 0.015
  assert abs((g[:, 0] == D).mean() - (0.35 * 0.1 + 0.5 * 0.1)) < 0.02
  with pytest.raises(ValueError, match="rule 'zip' is not one of"):
    fields.chunks(jax.random.key(0), jnp.ones((1, 2), jnp.int32),
                  jnp.ones((1, 2), jnp.int32), body=3, title=2,
                  num_fields=3, rule="zip")
