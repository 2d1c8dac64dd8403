"""zoo.grover: one article laid out as the scheme lays it out, its field's
likelihood, prompts and sampled fields."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from data import articles
from objectives import fields
from zoo import generate
from zoo import grover
from zoo import loading
from zoo import models

C, T, D = grover.CONTEXT, grover.TARGET, grover.DROPPED
# Two articles as rows: markers 60-65 (topic 60/61, headline 62/63, body
# 64/65), eos 1.
ROWS = [{"tokens": np.array([60, 10, 61, 62, 20, 21, 63, 64, 30, 31, 32, 65,
                             1], np.int32),
         "field_ids": np.array([1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 3, 0],
                               np.int32)},
        {"tokens": np.array([60, 11, 61, 62, 22, 63, 64, 33, 65, 1],
                            np.int32),
         "field_ids": np.array([1, 1, 1, 2, 2, 2, 3, 3, 3, 0], np.int32)}]


def _kept(laid, i):
  n = int((laid["tokens"][i] != 0).sum())
  return laid["tokens"][i, :n].tolist(), laid["field_ids"][i, :n].tolist()


def test_layout_puts_context_fields_before_the_target_and_drops_the_rest():
  laid = grover.layout(ROWS, (C, D, T))
  assert _kept(laid, 0) == ([60, 10, 61, 64, 30, 31, 32, 65, 1],
                            [1, 1, 1, 3, 3, 3, 3, 3, 0])
  laid = grover.layout(ROWS, (T, C, C), length=12)  # the topic after
  assert laid["tokens"].shape == (2, 12)
  assert _kept(laid, 1)[0] == [62, 22, 63, 64, 33, 65, 60, 11, 61, 1]
  with pytest.raises(ValueError, match="2 groups for field ids up to 3"):
    grover.layout(ROWS, (C, T))


@pytest.mark.parametrize("seed", range(4))
def test_layout_matches_the_schemes_arrangement_of_a_packed_row(seed):
  # Both articles packed in one row, as the loader packs them; the scheme
  # draws each field's group (`fields.chunks`) and arranges the row.
  tok = jnp.asarray(np.concatenate([r["tokens"] for r in ROWS]))[None]
  fid = jnp.asarray(np.concatenate([r["field_ids"] for r in ROWS]))[None]
  seg = jnp.asarray(np.repeat([1, 2], [len(r["tokens"]) for r in ROWS]))[None]
  group = fields.chunks(jax.random.key(seed), seg, fid, body=3, title=2,
                        num_fields=3, rule="release", drop=0.5)
  keep, seg_out, _, tok_out = fields.arrange(group, seg, fid, tok)
  for i, row in enumerate(ROWS):
    at = np.flatnonzero(np.asarray(seg[0]) == i + 1)
    drawn = {int(f): int(g) for f, g in zip(np.asarray(fid[0])[at],
                                             np.asarray(group[0])[at])}
    want = np.asarray(tok_out[0])[np.asarray(keep[0])
                                  & (np.asarray(seg_out[0]) == i + 1)]
    got = _kept(grover.layout([row], [drawn[f] for f in (1, 2, 3)]), 0)[0]
    assert got == want.tolist(), (seed, drawn)


def test_article_row_reads_each_field_in_its_markers_then_eos(tok):
  article = {"topic": "sport", "headline": "A late goal.",
             "body": "The match ended.\nFans left."}
  row = grover.article_row(tok, article)
  marks = articles.markers(tok.specials())
  f, t = row["field_ids"], row["tokens"]
  assert f.tolist() == sorted(f[:-1].tolist()) + [0]
  assert t[-1] == tok.specials()["eos"]
  for field, (begin, end) in enumerate(marks, 1):
    ids = t[f == field]
    assert ids[0] == begin and ids[-1] == end and len(ids) > 2
  assert tok.decode(t[f == grover.BODY][1:-1].tolist()).startswith(
      "The match ended.")


@pytest.fixture(scope="module")
def gpt2():
  """(config, params) of a random tiny GPT-2 over 8,000 ids."""
  config = models.make_config("gpt2", "tiny", vocab_size=8000,
                              dropout_rate=0.0)
  model = models.get("gpt2").Model(config)
  params = jax.jit(lambda r: model.init(r, jnp.ones((1, 8), jnp.int32)))(
      jax.random.key(0))["params"]
  return config, params


def test_field_nll_sums_the_fields_pieces_after_its_begin_marker(gpt2):
  config, params = gpt2
  model = models.get("gpt2").Model(config)
  for groups in ((C, C, T), (D, D, T)):
    laid = grover.layout(ROWS, groups, length=16)
    nll, count = grover.field_nll(params, laid["tokens"], laid["field_ids"],
                                  family="gpt2", config=config, field=3)
    for i, row in enumerate(ROWS):
      ids, fid = _kept(laid, i)
      logits = model.apply({"params": params}, jnp.asarray([ids]))["logits"]
      logp = np.asarray(jax.nn.log_softmax(logits[0]))
      body = [j for j in range(1, len(ids)) if fid[j] == 3 and fid[j - 1] == 3]
      assert count[i] == len(body) == (4 if i == 0 else 2)
      want = -sum(logp[j - 1, ids[j]] for j in body)
      np.testing.assert_allclose(nll[i], want, rtol=1e-5)


def test_prompts_end_at_the_fields_begin_marker():
  got = grover.prompts(ROWS, (C, C, T), grover.BODY)
  assert got == [[60, 10, 61, 62, 20, 21, 63, 64], [60, 11, 61, 62, 22, 63, 64]]
  assert grover.prompts(ROWS, (D, D, T), grover.BODY) == [[64], [64]]
  with pytest.raises(ValueError, match="dropped"):
    grover.prompts(ROWS, (C, C, D), grover.BODY)
  assert grover.left_pad(got, 9, 0)[1].tolist() == [0, 0] + got[1]


def test_write_field_at_top_k_1_is_the_greedy_body_cut_at_its_end(gpt2, tok):
  config, params = gpt2
  loaded = loading.Loaded("gpt2", config, params, tok, None, "random")
  marks = articles.markers(tok.specials())
  rows = [grover.article_row(tok, {"topic": "tech", "headline": h,
                                   "body": "Text."}) for h in ("A b.", "C.")]
  prompt = grover.prompts(rows, (C, C, T), grover.BODY)
  got = grover.write_field(loaded, prompt, grover.BODY, jax.random.key(1),
                           max_len=6, top_k=1, batch_size=4)
  width = max(map(len, prompt))
  greedy = generate.greedy_decoder(
      params, grover.left_pad(prompt, width, 0), family="gpt2",
      config=config, max_len=6, eos_id=marks[2][1])
  for ids, row in zip(got, generate.trim(greedy, marks[2][1])):
    eos = tok.specials()["eos"]
    assert ids == (row[:row.index(eos)] if eos in row else row)
    assert len(ids) <= 6
