"""Every training config trains through the one trainer on the sample
(a speech config on the small speech sample of `conftest.speech_dir`).

Every config builds its objective and traces a gradient step
(`jax.eval_shape`: every shape and option check, no compile). One config
per model family (the family's own scheme), and one distilling from a
teacher, run one real optimizer step on the embedded sample sharded over
the 2x2x2 CPU mesh: the real path (data, objective, model, sharding,
trainer, checkpoint). Every scheme's real gradient step runs in
`test_accumulate.py`.
"""

import importlib
import json
import math
import pathlib

import jax
import pytest

from configs.compare import family as family_grid
from tests import lanes
from zoo import train as train_mod
from zoo import train_lib

pytestmark = pytest.mark.slow  # minutes of training runs: not the quick lane

CONFIGS = sorted(p.stem for p in
                 pathlib.Path(__file__).parent.parent.joinpath(
                     "configs").glob("*.py")
                 # workdir.py reads a run's config.json: no config of its own
                 if p.stem not in ("__init__", "common", "workdir"))


def _real_runs(names) -> list[str]:
  """Per model family the config of its own scheme (else its first), and
  the first config with a teacher."""
  chosen, teacher = {}, None
  for name in names:
    config = importlib.import_module(f"configs.{name}").get_config("tiny")
    own = config.objective == family_grid.FAMILY_SCHEME.get(config.model)
    if own or config.model not in chosen:
      chosen[config.model] = name
    if teacher is None and "teacher" in config.objective_args:
      teacher = name
  return sorted(set(chosen.values()) | {teacher} - {None})


REAL = _real_runs(CONFIGS)


def _family(name: str) -> str:
  """The model family of config `name`."""
  return importlib.import_module(f"configs.{name}").get_config("tiny").model


def _one_step_config(name: str, request=None):
  config = importlib.import_module(f"configs.{name}").get_config("tiny")
  if config.data.source == "speech":
    config.data.path = str(request.getfixturevalue("speech_dir"))
  else:
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
def test_config_traces_a_gradient_step(name, request):
  config = _one_step_config(name, request)
  if "teacher" in config.objective_args:
    config.objective_args.teacher = request.getfixturevalue("teacher_workdir")
  obj = train_lib.build_objective(config, train_lib.specials_of(config, None))
  batch = train_lib.example_batch(int(config.seq_len), int(config.batch_size),
                                  config.data)
  params = jax.eval_shape(obj.init, jax.random.key(0), batch)
  (loss, metrics), grads = jax.eval_shape(
      jax.value_and_grad(obj.loss, has_aux=True), params, batch,
      jax.random.key(1))
  assert loss.shape == () and metrics
  assert jax.tree.structure(grads) == jax.tree.structure(params)


def test_every_model_family_runs_for_real():
  families = {_family(n) for n in CONFIGS}
  ran = {_family(n) for n in REAL}
  assert ran == families and len(REAL) == len(families) + 1


@pytest.mark.parametrize("name", lanes.sweep(REAL, family=_family))
def test_config_trains_one_sharded_step_on_the_sample(name, tmp_path,
                                                      request):
  config = _one_step_config(name, request)
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
