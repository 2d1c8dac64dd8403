"""Grover's scheme: every document's fields laid out afresh, then the next
token over the laid-out row."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from objectives import common
from objectives import fields
from tests import objective_checks as testing


def _article_batch():
  """Two rows of two documents [topic title body body eos], field ids set."""
  one = [[101, 102, 201, 301, 302, 1], [1, 1, 2, 3, 3, 0]]
  tokens = jnp.array([one[0] + one[0]] * 2, jnp.int32) + jnp.array(
      [[0] * 12, [10] * 5 + [0] + [10] * 5 + [0]], jnp.int32)
  fid = jnp.array([one[1] * 2] * 2, jnp.int32)
  doc = jnp.array([[1] * 6 + [2] * 6] * 2, jnp.int32)
  return common.as_batch({"tokens": tokens, "doc_ids": doc,
                          "sentence_ids": doc, "word_ids": jnp.cumsum(
                              jnp.ones_like(doc), 1), "field_ids": fid})


def test_layout_keeps_each_documents_fields_whole_and_in_its_place():
  obj = testing.build("grover", "gpt2")
  batch = _article_batch()
  for seed in range(6):
    out = obj.corrupt(batch, jax.random.key(seed))
    for r in range(2):
      toks, docs = np.asarray(out["tokens"][r]), np.asarray(out["doc_ids"][r])
      for d in (1, 2):
        got = toks[docs == d].tolist()
        original = np.asarray(batch["tokens"][r])[np.asarray(
            batch["doc_ids"][r]) == d].tolist()
        assert got[-1] == original[-1]  # the eos closes the document
        assert set(got) <= set(original) and original[3] in got  # the body
        body = got.index(original[3])
        assert got[body + 1] == original[4]  # a field moves whole
      assert (docs[:int((docs > 0).sum())] > 0).all()  # freed slots last


def test_without_dropout_or_body_only_nothing_is_lost():
  obj = testing.build("grover", "gpt2", drop=0.0, body_only=0.0)
  batch = _article_batch()
  out = obj.corrupt(batch, jax.random.key(0))
  assert sorted(np.asarray(out["tokens"]).ravel().tolist()) == sorted(
      np.asarray(batch["tokens"]).ravel().tolist())


def test_loss_is_the_next_token_over_the_laid_out_row():
  obj = testing.build("grover", "gpt2")
  batch = _article_batch()
  params = obj.init(jax.random.key(0), batch)
  rng = jax.random.key(4)
  loss, m = obj.loss(params, batch, rng, deterministic=True)
  laid = obj.corrupt(batch, jax.random.split(rng, 3)[0])
  clm = testing.build("clm", "gpt2")
  want, _ = clm.loss(params, {k: laid[k] for k in
                              ("tokens", "doc_ids", "sentence_ids",
                               "word_ids")}, rng, deterministic=True)
  np.testing.assert_allclose(float(loss), float(want), rtol=1e-5)
  assert float(m["weight_sum"]) == float((laid["tokens"] > 0).sum()) - 4


def test_grover_learns_and_names_a_bad_rule():
  testing.check(testing.build("grover", "gpt2"), testing.tiny_batch())
  with pytest.raises(ValueError, match="grover rule 'x' is not one of"):
    testing.build("grover", "gpt2", rule="x")
  assert fields.RULES == ("paper", "release")
