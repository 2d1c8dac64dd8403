"""The comparison harness's grids and cells (`zoo.harness.cells`): parsing,
budgets, random-init rows and their backbones, recipes, and the shipped
grids' arguments. The end-to-end runs are `test_compare.py`'s."""

import dataclasses

import jax
import ml_collections
import numpy as np
import pytest

import objectives
from configs.compare import compress, demo, family, long, smoke, t5_tables
import flax.linen as nn

from zoo import models, optim, sharding, train_lib
from zoo.harness import cells
from zoo.harness import run as harness_run

pytestmark = pytest.mark.slow  # grid-wide traces: not the quick lane


def test_flops_estimate_charges_electra_and_bart_more_than_mlm():
  grid = demo.get_config()
  specials = objectives.Specials(vocab_size=8000)
  est = {}
  for name, model in (("mlm", "bert"), ("electra", "electra"),
                      ("bart", "bart")):
    cell = cells.Cell(name, name, model, "tiny", {}, {})
    est[name] = cells.flops_estimate(cells.cell_config(grid, cell), specials)
  assert est["bart"]["flops_per_token"] > est["mlm"]["flops_per_token"]
  assert est["electra"]["params"] > 0
  budget = cells.budget_steps(grid) * demo.BATCH * demo.SEQ_LEN
  assert budget >= grid.budget_tokens
  assert est["mlm"]["flops_total"] == pytest.approx(
      est["mlm"]["flops_per_token"] * budget)


def test_budget_sets_steps_and_the_schedule_ends_there():
  grid = demo.get_config("tokens=100000")
  config = cells.cell_config(grid, cells.parse_cells(grid)[0])
  assert config.steps == -(-100000 // (demo.BATCH * demo.SEQ_LEN))
  assert config.optimizer.decay_steps == -1  # decay ends at `steps`


def test_grid_model_args_reach_every_cell_and_a_cell_overrides_them():
  grid = demo.get_config("tokens=100000")
  grid.pretrain.model_args = ml_collections.ConfigDict(
      dict(dropout_rate=0.0, attention_dropout_rate=0.0))
  grid.cells[0]["model_args"] = dict(dropout_rate=0.2)
  parsed = {c.name: c for c in cells.parse_cells(grid)}
  mlm = cells.cell_config(grid, parsed["mlm"]).model_args.to_dict()
  clm = cells.cell_config(grid, parsed["clm"]).model_args.to_dict()
  assert mlm == dict(dropout_rate=0.2, attention_dropout_rate=0.0)
  assert clm == dict(dropout_rate=0.0, attention_dropout_rate=0.0)
  specials = objectives.Specials(vocab_size=4000)
  _, config, _ = cells.backbone(grid, parsed["random_gpt2"], "/nonexistent",
                                specials)
  assert config.dropout_rate == 0.0


def test_demo_budget_is_at_least_one_pass_over_the_sample():
  import data  # pylint: disable=import-outside-toplevel
  grid = demo.get_config()
  tokens = cells.corpus_tokens(grid, data.load_tokenizer(grid.pretrain.data))
  assert 1.5 * tokens <= grid.budget_tokens < 1.51 * tokens


def test_every_family_gets_its_random_init_row():
  grid = demo.get_config()
  parsed = cells.parse_cells(grid)
  names = [c.name for c in parsed]
  for cell in parsed:
    assert cell.baseline in names
  assert names[-3:] == ["random_bert", "random_gpt2", "random_t5"]
  # A listed random-init row is renamed for its family and not repeated.
  grid.cells = list(grid.cells) + [dict(name="none", objective="",
                                        model="bert")]
  names = [c.name for c in cells.parse_cells(grid)]
  assert names.count("random_bert") == 1


def test_a_row_may_name_a_random_init_row_of_its_own_shape(tmp_path):
  grid = compress.get_config()
  parsed = {c.name: c for c in cells.parse_cells(grid)}
  narrow = parsed["tinybert"]
  assert narrow.baseline == "random_tinybert"
  assert parsed["random_tinybert"].is_baseline
  assert parsed["random_tinybert"].model_args == narrow.model_args
  assert parsed["random_bert"].model_args == parsed["teacher"].model_args
  assert [c.name for c in parsed.values() if c.is_baseline] == [
      "random_bert", "random_distil", "random_tinybert",
      "random_mobilebert", "random_albert"]
  specials = objectives.Specials(vocab_size=4000)
  _, config, params = cells.backbone(grid, parsed["random_tinybert"],
                                     str(tmp_path), specials)
  assert (config.num_layers, config.embed_dim) == (
      narrow.model_args["num_layers"], narrow.model_args["embed_dim"])
  # A fresh init (the teacher's workdir is never read) with the scheme's
  # model settings: no NSP head, as MLM-style schemes build BERT.
  assert "encoder" in params and "nsp" not in params
  bad = ml_collections.ConfigDict(grid.to_dict())
  bad.cells = [dict(bad.cells[0], random_row="teacher")]
  with pytest.raises(ValueError, match="must start with 'random_'"):
    cells.parse_cells(bad)
  bad.cells = [dict(grid.cells[0], random_row="random_x"),
               dict(name="random_x", model="albert")]
  with pytest.raises(ValueError, match="random-init row of family 'bert'"):
    cells.parse_cells(bad)


def test_random_init_row_has_the_pretrained_backbone_architecture(tmp_path):
  grid = smoke.get_config()
  specials = objectives.Specials(vocab_size=8000)
  parsed = {c.name: c for c in cells.parse_cells(grid)}
  family, config, params = cells.backbone(grid, parsed["random_bert"],
                                          str(tmp_path), specials)
  objective = train_lib.build_objective(
      cells.cell_config(grid, parsed["mlm"]), specials)
  shapes = jax.eval_shape(objective.init, jax.random.key(0),
                          train_lib.example_batch(64))
  ref_family, ref_config, ref_params = objective.backbone(
      nn.meta.unbox(shapes))
  assert (family, config) == (ref_family, ref_config)
  assert (jax.tree_util.tree_structure(params) ==
          jax.tree_util.tree_structure(ref_params))


def test_a_random_init_row_is_where_its_pretrained_row_starts(tmp_path):
  grid = smoke.get_config()
  specials = objectives.Specials(vocab_size=8000)
  parsed = {c.name: c for c in cells.parse_cells(grid)}
  _, _, params = cells.backbone(grid, parsed["random_bert"], str(tmp_path),
                                specials)
  config = cells.cell_config(grid, parsed["mlm"])
  objective = train_lib.build_objective(config, specials)
  setup = train_lib.setup_state(objective, optim.make(config.optimizer, 1),
                                config, sharding.make_mesh(config.mesh))
  state = setup.init(train_lib.init_rng(int(config.seed)))
  _, _, start = objective.backbone(state["params"])
  for got, want in zip(jax.tree_util.tree_leaves(params),
                       jax.tree_util.tree_leaves(start)):
    np.testing.assert_array_equal(got, want)


def test_bad_grids_get_clear_errors():
  grid = smoke.get_config()
  bad = ml_collections.ConfigDict(grid.to_dict())
  bad.cells = [dict(name="x", objective="no_such_scheme", model="bert")]
  with pytest.raises(ValueError, match="no_such_scheme.*not registered"):
    cells.check_grid(bad)
  bad.cells = [dict(name="x", objective="mlm", model="bert"),
               dict(name="x", objective="mlm", model="bert")]
  with pytest.raises(ValueError, match="repeated"):
    cells.check_grid(bad)
  bad = ml_collections.ConfigDict(grid.to_dict())
  bad.tasks = ["no_such_task"]
  with pytest.raises(ValueError, match="no_such_task"):
    cells.check_grid(bad)
  bad.tasks = ["vader"]
  with pytest.raises(ValueError, match="kind 'class'"):
    cells.check_grid(bad)
  bad = ml_collections.ConfigDict(grid.to_dict())
  del bad["budget_tokens"]
  with pytest.raises(ValueError, match="budget_tokens"):
    cells.check_grid(bad)


def test_a_view_of_another_grid_is_refused(tmp_path):
  grid = smoke.get_config()
  cell = cells.parse_cells(grid)[0]
  path = tmp_path / "views" / "probe.json"
  cells.write_json(str(path), {"fingerprint": "something-else"})
  with pytest.raises(ValueError, match="another grid"):
    harness_run._stored(str(path), harness_run.view_key(grid, cell, "probe"),
                        str(tmp_path))


def test_shipped_grids_are_valid():
  for module in (demo, t5_tables, smoke, family, long, compress):
    grid = module.get_config()
    cells.parse_cells(grid)
    assert len(grid.seeds) >= 2
  assert len(demo.get_config().seeds) >= 3
  assert len(demo.TASKS) >= 3
  rows = {c["t5_row"] for c in t5_tables.get_config().cells}
  assert rows <= set(t5_tables.PUBLISHED) and len(rows) == 14
  fam = family.get_config()
  assert objectives.aliases() == {"t5": "t5_span"}
  schemes = set(objectives.names()) - set(objectives.aliases())
  assert {c["objective"] for c in fam.cells} == schemes - set(
      family.TEACHER_SCHEMES) - set(family.SPEECH_SCHEMES)
  assert set(family.TEACHER_SCHEMES) <= {
      c.get("objective") for c in compress.get_config().cells}
  slow = compress.get_config("teacher=small,lr=5e-4").cells
  assert {c.get("optimizer", {}).get("lr") for c in slow
          if "objective" in c} == {5e-4}
  assert "lr" not in next(c for c in slow if c["name"] == "int8").get(
      "optimizer", {})
  assert next(c for c in slow if c["name"] == "pruned90")["optimizer"][
      "prune"]["target"] == 0.9
  memory = [c for c in cells.parse_cells(fam) if c.model == "transfo_xl"]
  assert [(c.name, c.objective_args) for c in memory] == [
      ("clm_memory", {"memory": True}), ("random_transfo_xl", {})]
  with pytest.raises(ValueError, match="tokens="):
    demo.get_config("steps=3")


def test_grid_arguments_set_the_few_shot_rate():
  assert demo.get_config().few_shot.lr == demo.FT_LR
  assert demo.get_config("ft_lr=5e-4,k=8").few_shot.to_dict() == dict(
      demo.few_shot(k=8).to_dict(), lr=5e-4)
  small = compress.get_config("teacher=small,lr=5e-4,ft_lr=5e-4")
  assert small.few_shot.lr == 5e-4
  assert {c.get("optimizer", {}).get("lr") for c in small.cells
          if "objective" in c} == {5e-4}
  with pytest.raises(ValueError, match="ft_lr=.fast. is not a number"):
    demo.get_config("ft_lr=fast")
  with pytest.raises(ValueError, match="positive"):
    demo.get_config("ft_lr=0")
  with pytest.raises(ValueError, match="teachers are"):
    compress.get_config("teacher=huge")


def test_every_family_cell_backbone_loads_for_finetuning():
  """Each scheme's `backbone()` fits the model fine-tuning builds (shapes
  only: params are zeros of the abstract init)."""
  from zoo import finetune  # pylint: disable=import-outside-toplevel
  import data.tasks  # pylint: disable=import-outside-toplevel
  task = data.tasks.load("trec")
  for grid, cell in [(g, c) for g in (family.get_config(), long.get_config())
                     for c in cells.parse_cells(g)]:
    if not cell.pretrained:
      continue
    config = cells.cell_config(grid, cell)
    # The grid's own vocabulary: FastText's n-grams are its pieces'.
    specials = objectives.Specials(**data.load_tokenizer(config.data)
                                   .specials())
    objective = train_lib.build_objective(config, specials)
    example = train_lib.example_batch(int(config.seq_len))
    shapes = jax.eval_shape(objective.init, jax.random.key(0), example)
    zeros = jax.tree_util.tree_map(lambda a: np.zeros(a.shape, a.dtype),
                                   shapes)
    name, model_config, params = objective.backbone(zeros)
    if name not in models.FAMILIES:  # tests/toy.py's scheme, when loaded
      continue
    spec = finetune.make_spec(name, model_config, task, steps=1)
    fresh = jax.eval_shape(finetune.run._fresh, spec, 32, jax.random.key(0))
    loaded = finetune.load_backbone(
        jax.tree_util.tree_map(lambda a: np.zeros(a.shape, a.dtype),
                               fresh["backbone"]), params)
    assert (jax.tree_util.tree_structure(loaded) ==
            jax.tree_util.tree_structure(fresh["backbone"])), cell.name


def test_family_grid_runs_a_chosen_subset():
  grid = family.get_config("only=plm+clm_memory+clm,k=8")
  names = [c.name for c in cells.parse_cells(grid)]
  assert names == ["clm", "plm", "clm_memory", "random_gpt2",
                   "random_xlnet", "random_transfo_xl"]
  assert grid.few_shot.k == 8
  with pytest.raises(ValueError, match=r"only= names cells \['nope'\] the"):
    family.get_config("only=nope")


def test_a_family_fine_tunes_by_its_own_recipe_random_init_included():
  grid = family.get_config("only=awd_lm+clm")
  parsed = {c.name: c for c in cells.check_grid(grid)}
  for name in ("awd_lm", "random_awd_lstm"):
    recipe = harness_run.view_recipe(grid, parsed[name], "few_shot")
    assert recipe["head"] == "ulmfit" and recipe["ulmfit"]["unfreeze_every"]
    assert "by_family" not in recipe
  plain = harness_run.view_recipe(grid, parsed["clm"], "few_shot")
  assert "head" not in plain and "by_family" not in plain
  # Another family's recipe leaves a row's fingerprint as it was.
  before = harness_run.view_key(family.get_config("only=clm"),
                                parsed["clm"], "few_shot")
  assert before == harness_run.view_key(grid, parsed["clm"], "few_shot")
  grid.few_shot.by_family = {"bert": {"head": "ulmfit"}}
  with pytest.raises(ValueError, match=r"by_family names families \['bert'\]"):
    cells.check_grid(grid)


def test_a_cell_may_pre_train_on_other_text():
  grid = family.get_config("only=cove_mt")
  cove, random_cove = cells.check_grid(grid)
  assert cells.cell_config(grid, cove).data.source == "parallel"
  assert cells.cell_config(grid, random_cove).data.source == "sample"
  bad = dataclasses.replace(cove, data={"nope": 1})
  with pytest.raises(ValueError, match="unknown data field 'nope'"):
    cells.cell_config(grid, bad)


def test_demo_grid_runs_one_row_at_another_budget():
  grid = demo.get_config("tokens=7700000,only=mlm")
  names = [c.name for c in cells.parse_cells(grid)]
  assert names == ["mlm", "random_bert"] and grid.budget_tokens == 7_700_000
  assert grid.cells[0]["model_args"] == {"trigram_input": True}
  with pytest.raises(ValueError, match=r"only= names cells \['t5'\] the"):
    demo.get_config("only=t5")


def test_t5_tables_grid_runs_chosen_rows_with_their_published_figures():
  grid = t5_tables.get_config("only=bert_style+deshuffling,tokens=1000000")
  names = [c.name for c in cells.parse_cells(grid)]
  assert names == ["bert_style", "deshuffling", "random_t5"]
  assert set(grid.published) == {"table4/bert_style", "table4/deshuffling"}
  assert grid.budget_tokens == 1_000_000


def test_random_t5_is_also_read_as_each_t5_row_is():
  grid = t5_tables.get_config()
  random_t5 = next(c for c in cells.parse_cells(grid) if c.is_baseline)
  assert cells.scorings(grid, random_t5) == ("deshuffle", "dropped",
                                             "infill", "prefix")
  assert harness_run.views_of(grid, random_t5)[3:] == (
      "minimal_pairs@deshuffle", "minimal_pairs@dropped",
      "minimal_pairs@infill", "minimal_pairs@prefix")
  span = next(c for c in cells.parse_cells(grid) if c.name == "span_3")
  assert harness_run.views_of(grid, span) == harness_run.VIEWS
  demo_grid = demo.get_config()
  assert all(harness_run.views_of(demo_grid, c) == harness_run.VIEWS
             for c in cells.parse_cells(demo_grid))
