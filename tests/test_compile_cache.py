"""zoo.compile_cache: a second process reads its programs from disk."""

import json
import os
import subprocess
import sys

import pytest

from tests.child_env import REPO, child_env
from zoo import compile_cache

_CHILD = """
import json, jax, jax.numpy as jnp
from zoo import compile_cache
events = {"hits": 0, "misses": 0}
def count(name, **kw):
  if name.endswith("/cache_hits"): events["hits"] += 1
  if name.endswith("/cache_misses"): events["misses"] += 1
jax.monitoring.register_event_listener(count)
compile_cache.watch()
events["folder"] = compile_cache.enable()
f = jax.jit(lambda x: jnp.tanh(x) @ x.T)
f(jnp.ones((8, 8))).block_until_ready()
events["seconds"] = compile_cache.compile_seconds()
events["compiles"] = compile_cache.compiles()
f(jnp.ones((8, 8))).block_until_ready()  # compiled: no time added
events["again"] = compile_cache.compile_seconds() - events["seconds"]
events["compiled_again"] = compile_cache.compiles() - events["compiles"]
events["zoo_hits"] = compile_cache.cache_hits()
print(json.dumps(events))
"""


def _env(cache: str, **extra) -> dict:
  env = child_env("", 1)
  env.pop("JAX_COMPILATION_CACHE_DIR")
  env[compile_cache.ENV] = cache
  env.update(extra)
  return env


def _child(cache: str) -> dict:
  out = subprocess.run([sys.executable, "-c", _CHILD], cwd=REPO,
                       env=_env(cache), capture_output=True, text=True,
                       check=True, timeout=300)
  return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_second_process_hits_the_cache_the_first_filled(tmp_path):
  cache = str(tmp_path / "cache")
  first = _child(cache)
  assert first["folder"] == cache
  assert first["misses"] >= 1 and first["hits"] == 0
  assert os.listdir(cache)
  second = _child(cache)
  assert second["hits"] == first["misses"] and second["misses"] == 0
  assert second["zoo_hits"] == second["hits"] and first["zoo_hits"] == 0
  for run in (first, second):
    assert run["seconds"] > 0 and run["again"] == 0
    # Read back or compiled, each program is one backend compile.
    assert run["compiles"] == first["misses"] and run["compiled_again"] == 0


def test_compile_seconds_count_nested_spans_once(monkeypatch):
  monkeypatch.setitem(compile_cache._watch, "spans",  # pylint: disable=protected-access
                      [(0.0, 4.0), (1.0, 2.0), (3.0, 5.0), (7.0, 8.0)])
  assert compile_cache.compile_seconds() == 6.0


def test_off_by_the_environment_and_defaults_under_the_data_dir(monkeypatch):
  import data  # pylint: disable=import-outside-toplevel
  for off in ("0", "off", "False"):
    monkeypatch.setenv(compile_cache.ENV, off)
    assert compile_cache.folder() is None
  monkeypatch.delenv(compile_cache.ENV)
  assert compile_cache.folder() == str(data.data_dir() / "jax_cache")


@pytest.mark.slow
def test_zoo_train_fills_the_cache_unless_told_not_to(tmp_path):
  for flag, cache in (("--compile_cache", tmp_path / "on"),
                      ("--nocompile_cache", tmp_path / "off")):
    subprocess.run(
        [sys.executable, "-m", "zoo.train", "--config",
         "configs/bert_mlm.py:tiny,steps=2,eval_steps=0,checkpoint_every=2",
         "--workdir", str(tmp_path / flag), flag],
        cwd=REPO, env=_env(str(cache)), capture_output=True, check=True,
        timeout=600)
  assert os.listdir(tmp_path / "on")
  assert not (tmp_path / "off").exists()
