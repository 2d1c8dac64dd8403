"""Compressed rows of a grid: a distilled, a quantised and a pruned row run
end to end beside their teacher, and the compression table reads them."""

import os

import numpy as np
import pytest

from configs.compare import compress, smoke
from zoo.compress import magnitude
from zoo.harness import cells
from zoo.harness import compressed
from zoo.harness import report
from zoo.harness import run as harness_run

TINY = dict(num_layers=2, embed_dim=64, num_heads=4, mlp_dim=128)


def _grid(names):
  grid = smoke.get_config()
  steps = cells.budget_steps(grid)
  grid.cells = [c for c in compress.cells(TINY, steps) if c["name"] in names]
  grid.compare_to = "teacher"
  return grid


def test_references_must_name_earlier_cells():
  grid = _grid(("teacher", "distil"))
  grid.cells = list(reversed(grid.cells))
  with pytest.raises(ValueError, match="not an earlier cell"):
    cells.parse_cells(grid)
  grid = _grid(("teacher", "int8"))
  grid.cells[1]["quant"] = "int4"
  with pytest.raises(ValueError, match="quant 'int4'"):
    cells.parse_cells(grid)


def test_pruned_rows_hold_their_sparsity_while_fine_tuning():
  grid = _grid(("teacher", "pruned90"))
  pruned = cells.parse_cells(grid)[1]
  hold = compressed.hold_sparsity(pruned)
  assert hold.target == hold.initial == 0.9
  assert float(magnitude.sparsity_at(hold, 0)) == pytest.approx(0.9)
  assert compressed.hold_sparsity(cells.parse_cells(grid)[0]) is None


@pytest.mark.slow
def test_compression_rows_run_end_to_end(tmp_path):
  # TinyBERT's row reads its teacher as DistilBERT's does (an "@teacher"
  # reference); its scheme trains in test_objectives_distill.
  grid = _grid(("teacher", "distil", "int8", "pruned90"))
  results = harness_run.run(grid, str(tmp_path))
  rows = {r["name"]: r for r in results["rows"]}
  assert list(rows) == ["teacher", "distil", "int8", "pruned90",
                        "random_bert", "random_distil"]
  assert rows["distil"]["baseline"] == "random_distil"
  foot = {n: r["footprint"] for n, r in rows.items()}
  assert foot["distil"]["params"] < foot["teacher"]["params"]
  # The student's own random init has its shape, not the teacher's.
  assert foot["random_distil"]["params"] == foot["distil"]["params"]
  # int8 stores about a quarter of the float bytes.
  assert foot["int8"]["bytes"] < 0.4 * foot["teacher"]["bytes"]
  assert foot["int8"]["params"] == foot["teacher"]["params"]
  # 90% of every matrix but the embedding tables is zero.
  d, f = TINY["embed_dim"], TINY["mlp_dim"]
  matrices = TINY["num_layers"] * (4 * d * d + 2 * d * f)
  zeros = foot["pruned90"]["params"] - foot["pruned90"]["nonzero"]
  assert zeros >= 0.9 * matrices
  assert not os.path.exists(tmp_path / "cells" / "int8" / "checkpoints")
  for name, row in rows.items():
    for view in ("minimal_pairs", "probe", "few_shot"):
      got = row["views"][view]
      assert np.isfinite(got["average"][0])
      assert (got.get("vs_reference") is None) == (name == "teacher")
  # The quantised row scores what the teacher scores, give or take the
  # rounding: its views ran quantised, not as the float teacher.
  int8, teacher = rows["int8"]["views"], rows["teacher"]["views"]
  assert int8["probe"]["average"] != teacher["probe"]["average"]
  assert set(results["latency"]) == set(rows)
  assert all(ms > 0 for ms in results["latency"].values())
  table = "\n".join(report.compression_table(results))
  assert "| int8 |" in table and "MB on disk" in table
  assert os.path.exists(tmp_path / "compression.png")
