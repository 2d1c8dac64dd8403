"""Every training config trains through the one trainer on the sample.

One optimizer step per config, on the embedded sample, sharded over the
2x2x2 CPU mesh: the real path (data, objective, model, sharding, trainer,
checkpoint) for every scheme.
"""

import importlib
import json
import math
import pathlib

import pytest

from zoo import train as train_mod

pytestmark = pytest.mark.slow  # minutes of training runs: not the quick lane

CONFIGS = sorted(p.stem for p in
                 pathlib.Path(__file__).parent.parent.joinpath(
                     "configs").glob("*.py")
                 # workdir.py reads a run's config.json: no config of its own
                 if p.stem not in ("__init__", "common", "workdir"))


def _one_step_config(name: str):
  config = importlib.import_module(f"configs.{name}").get_config("tiny")
  config.data.source = "sample"
  config.steps = 1
  config.batch_size = 8
  config.seq_len = 32
  config.mesh = {"data": 2, "fsdp": 2, "tensor": 2}
  config.eval_steps = 0
  config.log_every = 1
  config.checkpoint_every = 1
  return config


def test_every_scheme_has_a_config():
  import objectives  # pylint: disable=import-outside-toplevel
  named = set()
  for name in CONFIGS:
    named.add(importlib.import_module(f"configs.{name}")
              .get_config("tiny").objective)
  objectives.names()
  # Schemes of the package only: tests may register their own.
  shipped = {n for n, cls in objectives._REGISTRY.items()  # pylint: disable=protected-access
             if cls.__module__.startswith("objectives.")}
  missing = shipped - named
  assert not missing, f"schemes without a config: {sorted(missing)}"


@pytest.fixture(scope="module")
def teacher_workdir(tmp_path_factory):
  """A BERT trained one step on the sample: what distillation configs
  distil from."""
  workdir = tmp_path_factory.mktemp("teacher")
  train_mod.train(_one_step_config("bert_mlm"), str(workdir))
  return str(workdir)


@pytest.mark.parametrize("name", CONFIGS)
def test_config_trains_one_sharded_step_on_the_sample(name, tmp_path,
                                                      request):
  config = _one_step_config(name)
  if "teacher" in config.objective_args:
    config.objective_args.teacher = request.getfixturevalue("teacher_workdir")
  out = train_mod.train(config, str(tmp_path))
  assert out["step"] == 1
  assert math.isfinite(out["loss"]) and out["loss"] > 0
  assert (tmp_path / "checkpoints" / "1").is_dir()
  logged = [json.loads(l) for l in
            (tmp_path / "metrics.jsonl").read_text().splitlines()]
  assert logged and all(math.isfinite(r["loss"]) for r in logged
                        if "loss" in r)
