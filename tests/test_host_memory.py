"""zoo.host_memory: freed host buffers stay mapped, so a rerun does not fault."""

import os
import subprocess
import sys
import textwrap

import pytest

from zoo import host_memory

# A program whose temporaries (~64 MB) XLA:CPU allocates and frees per run;
# prints the minor page faults of the third run.
_PROBE = textwrap.dedent("""
    import resource
    import zoo
    import jax, jax.numpy as jnp
    f = jax.jit(lambda x: jax.nn.softmax(x @ x.T).sum(0))  # [4096, 4096] f32
    x = jnp.ones((4096, 8)) / 8
    for _ in range(2):
      f(x).block_until_ready()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    f(x).block_until_ready()
    after = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    print(zoo.host_memory.kept(), after - before)
""")


def _probe(setting: str) -> tuple[bool, int]:
  env = dict(os.environ, ZOO_HOST_MALLOC=setting, JAX_PLATFORMS="cpu")
  out = subprocess.run([sys.executable, "-c", _PROBE], env=env, check=True,
                       capture_output=True, text=True).stdout.split()
  return out[0] == "True", int(out[1])


def test_import_keeps_freed_memory_in_this_process():
  assert host_memory.keep() is host_memory.kept()
  if host_memory._libc() is not None:  # pylint: disable=protected-access
    assert host_memory.kept()


@pytest.mark.skipif(host_memory._libc() is None,  # pylint: disable=protected-access
                    reason="mallopt is glibc's; elsewhere keep() is a no-op")
def test_rerun_reuses_pages_and_the_switch_turns_it_off():
  kept, faults = _probe("1")
  off, faults_off = _probe("0")
  assert kept and not off
  # 64 MB of fresh pages is ~16k faults of 4 KiB; kept, the run reuses them.
  assert faults_off > 8000, faults_off
  assert faults < faults_off / 10, (faults, faults_off)
