"""The CPU kernel library: its build, and the tiled transpose with the
weight gradients that use it (the attention kernel: test_cpu_attention)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from zoo import sharding
from zoo.models import cpu_kernels, layers


@pytest.mark.parametrize("shape,lead,dtype", [
    ((37, 45), 1, jnp.float32),        # odd: part tiles on both sides
    ((2, 48, 64), 2, jnp.float32),     # whole 32 x 32 tiles (the AVX path)
    ((3, 33, 4, 9), 2, jnp.bfloat16),
    ((5, 70), 1, jnp.int8),
    ((4, 3, 2), 1, jnp.uint32),
    ((6, 5), 0, jnp.float32),          # nothing leading: a plain copy
])
def test_transpose_is_jnps(shape, lead, dtype):
  x = (jax.random.normal(jax.random.key(0), shape) * 50).astype(dtype)
  perm = (*range(lead, len(shape)), *range(lead))
  got = jax.jit(lambda x: cpu_kernels.transpose(x, lead))(x)
  assert got.dtype == x.dtype
  np.testing.assert_array_equal(got, jnp.transpose(x, perm))


def test_four_byte_elements_keep_their_bits():
  """4-byte elements move as floats: words that read as NaNs (signalling
  ones included) or denormals come out bit for bit."""
  x = jax.random.bits(jax.random.key(1), (19, 41), jnp.uint32)
  x = x.at[0, :4].set(jnp.array([0x7F800001, 0xFFC00001, 0x00000001,
                                 0x80000000], jnp.uint32))
  got = jax.jit(lambda x: cpu_kernels.transpose(x, 1))(x)
  np.testing.assert_array_equal(got, x.T)


def _step(in_dims=1):
  """A dense layer's loss and its gradients, jitted."""
  def loss(x, k):
    return jnp.sum(jnp.sin(layers.project(x, k, in_dims, "float32")))
  return jax.jit(jax.grad(loss, argnums=(0, 1)))


def test_weight_gradients_take_the_transpose_on_one_device(monkeypatch):
  x = jax.random.normal(jax.random.key(0), (3, 40, 33))
  k = jax.random.normal(jax.random.key(1), (33, 20))
  lowered = lambda: _step().trace(x, k).lower().as_text()  # pylint: disable=unnecessary-lambda-assignment
  assert "zoo_transpose" not in lowered()  # 8 devices: not partitioned
  want = _step()(x, k)
  monkeypatch.setattr(jax, "device_count", lambda: 1)
  assert "zoo_transpose" in lowered()
  got = _step()(x, k)
  for a, b in zip(got, want):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
  tpu = _step().trace(x, k).lower(lowering_platforms=("tpu",)).as_text()
  assert "zoo_transpose" not in tpu
  with cpu_kernels.off():
    assert "zoo_transpose" not in lowered()
  monkeypatch.setenv(cpu_kernels.TRANSPOSE_ENV, "0")
  assert "zoo_transpose" not in lowered()


@pytest.mark.parametrize("rows", [8, 3])  # 3: not divisible, kept whole
@pytest.mark.parametrize("head", [False, True])
def test_weight_gradients_take_the_transpose_per_device_under_a_mesh(
    rows, head):
  """On a data-parallel mesh, each device's rows through the tiled
  transpose, the devices' weight gradients added: autodiff's gradients,
  to float rounding. A tensor axis keeps autodiff's product."""
  mesh = sharding.make_mesh({"data": 4, "fsdp": 2, "tensor": 1})
  x = jax.random.normal(jax.random.key(0), (rows, 12, 33))
  w = jax.random.normal(jax.random.key(1), (20, 33) if head else (33, 20))
  if head:  # a tied output head's table
    fn = lambda x, w: layers.unembed(x, w, "float32")  # pylint: disable=unnecessary-lambda-assignment
  else:
    fn = lambda x, w: layers.project(x, w, 1, "float32")  # pylint: disable=unnecessary-lambda-assignment
  step = lambda: jax.jit(jax.grad(  # pylint: disable=unnecessary-lambda-assignment
      lambda x, w: jnp.sum(jnp.sin(fn(x, w))), argnums=(0, 1)))
  with sharding.activate(mesh, sharding.DEFAULT_RULES):
    x = jax.device_put(x, sharding.batch_sharding(
        mesh, sharding.DEFAULT_RULES, ndim=3) if rows == 8 else None)
    tiled, derived = step(), step()
    text = tiled.trace(x, w).lower().as_text()
    got = tiled(x, w)
    with cpu_kernels.off():
      assert "zoo_transpose" not in derived.trace(x, w).lower().as_text()
      want = derived(x, w)
  assert "zoo_transpose" in text and ("all_reduce" in text) == (rows == 8)
  with sharding.activate(sharding.make_mesh({"data": 4, "tensor": 2}),
                         sharding.DEFAULT_RULES):
    assert "zoo_transpose" not in step().trace(x, w).lower().as_text()
  for a, b in zip(got, want):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_a_failed_build_is_an_error_naming_the_compiler(monkeypatch,
                                                        tmp_path):
  monkeypatch.setattr(cpu_kernels, "_state", {})
  monkeypatch.setenv("ZOO_KERNEL_DIR", str(tmp_path))
  monkeypatch.setenv("CXX", "no-such-compiler")
  monkeypatch.setattr(jax, "device_count", lambda: 1)
  with pytest.raises(RuntimeError, match="no-such-compiler"):
    cpu_kernels.library()
  with pytest.warns(UserWarning, match="using XLA's"):
    assert not cpu_kernels.available()
  assert not cpu_kernels.transpose_applies()
  assert not list(tmp_path.glob("*.so"))
