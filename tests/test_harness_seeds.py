"""Pre-training seeds: replica grids, merged records, wider intervals."""

import json
import os

import pytest

from configs.compare import smoke
from zoo.harness import report
from zoo.harness import run as harness_run
from zoo.harness import seeds


def _record(name, preds, loss):
  return {"name": name, "objective": "mlm", "model": "bert", "size": "tiny",
          "baseline": "random_bert", "pretrain": {"loss": loss,
                                                  "tokens": 10.0},
          "seconds": {"pretrain": 1.0, "probe": 2.0},
          "views": {"probe": {"seconds": 2.0, "fingerprint": "x", "tasks": {
              "trec": {"metric": "accuracy", "labels": [0, 1],
                       "preds": preds}}}}}


def test_merge_stacks_predictions_and_averages_pretraining():
  got = seeds.merge([_record("a", [[0, 1]], 2.0), _record("a", [[1, 1]],
                                                          4.0)])
  assert got["views"]["probe"]["tasks"]["trec"]["preds"] == [[0, 1], [1, 1]]
  assert got["pretrain"]["loss"] == 3.0 and got["pretrain"]["seeds"] == 2
  assert got["seconds"] == {"pretrain": 2.0, "probe": 4.0}
  one = _record("a", [[0, 1]], 2.0)
  assert seeds.merge([one]) == one


def test_replicas_keep_the_first_seed_where_a_one_seed_grid_runs():
  grid = smoke.get_config()
  grid.pretrain_seeds = [0, 5]
  (s0, g0, d0), (s1, g1, d1) = seeds.replicas(grid, "/w")
  assert (s0, d0) == (0, "/w/cells") and (s1, d1) == (5, "/w/seeds/5/cells")
  assert g0.pretrain.seed == 0 and g1.pretrain.seed == 5
  assert grid.pretrain.seed == 0  # the grid itself is untouched
  grid.pretrain_seeds = [1, 1]
  with pytest.raises(ValueError, match="distinct"):
    seeds.seeds_of(grid)


@pytest.mark.slow
def test_two_pretraining_seeds_run_and_widen_the_table(tmp_path):
  grid = smoke.get_config()
  grid.cells = [c for c in grid.cells if c["name"] == "mlm"]
  grid.pretrain_seeds = [0, 1]
  results = harness_run.run(grid, str(tmp_path))
  assert os.path.isdir(tmp_path / "seeds" / "1" / "cells" / "mlm" /
                       "checkpoints")
  rows = {r["name"]: r for r in results["rows"]}
  assert rows["mlm"]["pretrain"]["seeds"] == 2
  assert results["pretrain_seeds"] == [0, 1]
  # Each seed pre-trained its own model: their probes predict otherwise.
  views = [json.loads((tmp_path / d / "mlm" / "views" / "probe.json")
                      .read_text()) for d in ("cells", "seeds/1/cells")]
  preds = [v["tasks"]["trec"]["preds"] for v in views]
  assert len(preds[0]) == len(preds[1]) == 1 and preds[0] != preds[1]
  assert "2 pre-training seeds" in report.markdown(results)
