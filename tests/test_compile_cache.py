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
events["folder"] = compile_cache.enable()
jax.jit(lambda x: jnp.tanh(x) @ x.T)(jnp.ones((8, 8))).block_until_ready()
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
