"""The harness reads one family's rows as that family needs: Transformer-XL
carrying its memory, static vectors, ULMFiT's head, Skip-Thought's encoder.

Each is one family's member of the harness-row sweep (`tests/lanes.py`):
`make test-all` runs them, `make test` runs the core families' rows in
`test_compare.py`.
"""

import os

import numpy as np
import pytest

from configs.compare import family, smoke
from zoo import checkpoint
from zoo.harness import run as harness_run

pytestmark = [pytest.mark.slow, pytest.mark.sweep]


def _rows(cells: list[dict], workdir, **few_shot) -> dict:
  """The smoke grid over `cells` (and their random inits), rows by name."""
  grid = smoke.get_config()
  grid.cells = cells
  for key, value in few_shot.items():
    grid.few_shot[key] = value
  results = harness_run.run(grid, str(workdir))
  return {r["name"]: r for r in results["rows"]}


def _assert_read(row: dict, views=("minimal_pairs", "probe", "few_shot")):
  for name in views:
    mean, low, high = row["views"][name]["average"]
    assert 0 <= low <= mean <= high <= 100, (row["name"], name)


def test_transfo_xl_memory_row_is_read_by_every_view(tmp_path):
  """The family grid's Transformer-XL row: pre-trained carrying its memory,
  then read by every view beside its own random init."""
  rows = _rows([dict(c) for c in family.EXTRA if c["model"] == "transfo_xl"],
               tmp_path)
  assert list(rows) == ["clm_memory", "random_transfo_xl"]
  ckpt = os.path.join(tmp_path, "cells", "clm_memory")
  state, _ = checkpoint.restore_replicated(ckpt)
  assert np.asarray(state["memory"]["valid"]).any()  # it carried one
  for row in rows.values():
    assert set(row["views"]) == {"minimal_pairs", "probe", "few_shot"}
    _assert_read(row)


def test_static_rows_are_read_by_the_views_that_apply(tmp_path):
  """word2vec (skip-gram) and FastText rows: probe and few-shot read their
  vectors beside their random inits; minimal pairs says why it does not
  apply."""
  rows = _rows([dict(name="skipgram", objective="skipgram",
                     model="word2vec")] +
               [dict(c) for c in family.EXTRA if c["model"] == "fasttext"],
               tmp_path)
  assert list(rows) == ["skipgram", "fasttext", "random_word2vec",
                        "random_fasttext"]
  for row in rows.values():
    views = row["views"]
    assert "no natural sentence score" in row["skipped"]["minimal_pairs"]
    assert views["minimal_pairs"]["delta"] is None or np.isnan(
        views["minimal_pairs"]["delta"][0])
    _assert_read(row, ("probe", "few_shot"))
  table = (tmp_path / "results.md").read_text()
  assert "| skipgram | word2vec |" in table and "| n/a |" in table
  assert "- n/a: fasttext, minimal pairs: word2vec has no natural" in table


def test_ulmfit_row_fine_tunes_through_its_head(tmp_path):
  """The AWD-LSTM pre-trained by awd_lm and its random init, both
  fine-tuned with ULMFiT's head and recipe, read by every view."""
  rows = _rows([dict(name="awd_lm", objective="awd_lm", model="awd_lstm")],
               tmp_path,
               by_family={"awd_lstm": family.BY_FAMILY["awd_lstm"]})
  assert list(rows) == ["awd_lm", "random_awd_lstm"]
  for row in rows.values():
    _assert_read(row)


def test_skip_thought_row_is_read_as_an_encoder(tmp_path):
  rows = _rows([dict(name="skip_thought", objective="skip_thought",
                     model="skip_thought")], tmp_path)
  assert list(rows) == ["skip_thought", "random_skip_thought"]
  for row in rows.values():
    assert "neighbour's vector" in row["skipped"]["minimal_pairs"]
    _assert_read(row, ("probe", "few_shot"))
