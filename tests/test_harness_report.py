"""The harness's report: intervals, paired deltas, floors, tau, README."""

import os
import zlib

import ml_collections
import numpy as np
import pytest

from zoo.harness import plots
from zoo.harness import report

N = 400


def _view(rng, p_correct: float, seeds: int, labels) -> dict:
  """A class view whose predictions are right with probability p."""
  preds = [np.where(rng.random(N) < p_correct, labels, 1 - labels).tolist()
           for _ in range(seeds)]
  return {"metric": "accuracy", "labels": labels.tolist(), "preds": preds,
          "losses": [[2.0, 1.5, 1.0]] * seeds}


def _record(name, model, objective, p, t5_row=""):
  rng = np.random.default_rng(zlib.crc32(name.encode()))  # not hash(): salted
  labels = np.random.default_rng(0).integers(0, 2, N)
  pairs = {ph: {"metric": "mean", "preds": [
      (rng.random(N) < p).astype(float).tolist()]} for ph in ("agr", "refl")}
  pretrained = objective != "none"
  return {"name": name, "objective": objective, "model": model,
          "size": "tiny", "t5_row": t5_row, "baseline": f"random_{model}",
          "pretrain": ({"tokens": 1e6, "passes": 1.2, "seconds": 30.0,
                        "loss": 3.0} if pretrained else {}),
          "seconds": {"probe": 1.0},
          "views": {"minimal_pairs": {"tasks": pairs},
                    "probe": {"tasks": {"t": _view(rng, p, 1, labels)}},
                    "few_shot": {"tasks": {"t": _view(rng, p, 3, labels)}}}}


def _grid(published=None):
  g = ml_collections.ConfigDict()
  g.tasks, g.seeds, g.budget_tokens = ["t"], [0, 1, 2], 10**6
  g.report_split = "validation"
  g.published = published or {}
  return g


@pytest.fixture(scope="module")
def results():
  records = [_record("good", "bert", "mlm", 0.8),
             _record("same", "bert", "nsp", 0.5),
             _record("random_bert", "bert", "none", 0.5)]
  floor = _record("floor", "-", "-", 0.6)["views"]
  return report.build(_grid(), records, floor)


def test_pretrained_rows_carry_paired_deltas_marked_when_clear(results):
  rows = {r["name"]: r for r in results["rows"]}
  good = rows["good"]["views"]["few_shot"]
  assert good["delta"][1] > 0 and good["delta_excludes_zero"]
  assert rows["random_bert"]["views"]["probe"]["delta"] is None
  same = rows["same"]["views"]["minimal_pairs"]
  assert abs(same["delta"][0]) < 10
  for row in rows.values():
    for view in row["views"].values():
      mean, low, high = view["average"]
      assert low <= mean <= high


def test_markdown_holds_every_view_floor_and_stars(results):
  text = report.markdown(results)
  assert "| good | bert |" in text and "floor: trigram LM" in text
  assert "*" in text.split("\n")[2]  # the good row's clear deltas
  for title in ("minimal pairs", "linear probe", "few-shot"):
    assert f"**{title}**" in text
  assert "Kendall" not in text
  assert "- good beats random_bert on minimal pairs, linear probe, " in text
  assert "- same beats random_bert on no view" in text
  # Loss and throughput of each pre-trained row, none for random init.
  pre = text.split("**pre-training**")[1].split("**minimal pairs**")[0]
  assert "| good | bert | 3.000 | 1.00M | 30 | 33,333 |" in pre
  assert "random_bert" not in pre
  assert "MLM loss" not in pre  # every headline is the row's only loss


def test_rows_whose_headline_is_not_the_mlm_show_their_mlm_loss():
  records = [_record("mlm", "bert", "mlm", 0.8),
             _record("albert", "albert", "sop", 0.7),
             _record("clm", "gpt2", "clm", 0.6),
             _record("random_bert", "bert", "none", 0.5)]
  records[0]["pretrain"].update(loss=4.5, mlm_loss=4.5)
  records[1]["pretrain"].update(loss=0.09, sentence_loss=0.09, mlm_loss=4.9)
  pre = "\n".join(report.pretrain_table({"rows": records}))
  assert "| row | model | final loss | MLM loss | tokens |" in pre
  assert "| mlm | bert | 4.500 | 4.500 | 1.00M |" in pre
  assert "| albert | albert | 0.090 | 4.900 | 1.00M |" in pre
  assert "| clm | gpt2 | 3.000 | - | 1.00M |" in pre
  assert "Final loss: the scheme's headline" in pre


def test_kendall_tau_against_the_published_order():
  published = {f"t/{i}": {"GLUE": float(g)} for i, g in
               enumerate((60, 70, 80))}
  records = [_record(f"r{i}", "t5", "t5_span", p, f"t/{i}")
             for i, p in enumerate((0.55, 0.7, 0.9))]
  records.append(_record("random_t5", "t5", "none", 0.5))
  out = report.build(_grid(published), records,
                     _record("floor", "-", "-", 0.6)["views"])
  tau = out["kendall"]["tau"]
  assert tau[0] == pytest.approx(1.0) and tau[1] <= tau[0] <= tau[2]
  assert "Kendall's tau" in report.markdown(out)


def test_a_row_is_paired_with_its_random_init_read_the_same_way():
  """random_t5 read by sentinel scoring (its default) and, for the row
  read by infilling, by infilling too: that row's Δ pairs the two
  infilled readings, whose outcomes here are identical (Δ exactly 0)."""
  infill = _record("bert_style", "t5", "t5_bert", 0.9)
  infill["views"]["minimal_pairs"]["method"] = "infill"
  span = _record("span", "t5", "t5_span", 0.9)
  span["views"]["minimal_pairs"]["method"] = "sentinel"
  base = _record("random_t5", "t5", "none", 0.5)
  base["views"]["minimal_pairs"]["method"] = "sentinel"
  base["views"]["minimal_pairs@infill"] = dict(
      infill["views"]["minimal_pairs"], method="infill")
  out = report.build(_grid(), [infill, span, base],
                     _record("floor", "-", "-", 0.6)["views"])
  rows = {r["name"]: r for r in out["rows"]}
  assert rows["bert_style"]["views"]["minimal_pairs"]["delta"] == [0, 0, 0]
  assert rows["span"]["views"]["minimal_pairs"]["delta"][1] > 20
  assert set(rows["random_t5"]["read_as"]) == {"infill"}
  assert rows["random_t5"]["views"]["minimal_pairs"]["average"][0] < 60
  text = report.markdown(out)
  assert ("- random_t5 read by infill scoring, as bert_style is read: "
          "minimal pairs 89.") in text


def test_results_files_plots_and_readme_section(results, tmp_path):
  report.write_all(str(tmp_path), results)
  for name in ("results.md", "results.csv", "results.json"):
    assert os.path.getsize(tmp_path / name) > 0
  assert report.read(str(tmp_path))["rows"][0]["name"] == "good"
  readme = tmp_path / "README.md"
  readme.write_text("intro\n<!-- results:start -->\nold\n<!-- results:end -->"
                    "\nmid\n<!-- t5:start -->\nold t5\n<!-- t5:end -->\nrest\n")
  report.update_readme(str(readme), str(tmp_path), "make demo")
  report.update_readme(str(readme), str(tmp_path), "zoo.compare ...", "t5")
  text = readme.read_text()
  # Both blocks, each with the good row's main and pre-training lines.
  assert "old" not in text and text.count("| good | bert |") == 4
  assert text.startswith("intro") and text.endswith("rest\n")
  assert "--block t5` from the results.json of `zoo.compare ...`" in text
  readme.write_text("no markers")
  with pytest.raises(ValueError, match="results:start"):
    report.update_readme(str(readme), str(tmp_path), "make demo")
  plots.plot_views(results, str(tmp_path / "views.png"))
  assert os.path.getsize(tmp_path / "views.png") > 0
