"""zoo.models.splash: the TPU kernel matches dense attention (interpret mode
on CPU), is chosen by "auto" for TPU programs, and compiles for a TPU
topology inside the sharded train step."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from zoo.models import layers
from zoo.models import masks

B, T, N, H = 2, 128, 2, 16


def _inputs(causal):
  rng = np.random.default_rng(0)
  q, k, v = (jnp.asarray(rng.normal(size=(B, T, N, H)), jnp.float32)
             for _ in range(3))
  seg = np.ones((B, T), np.int32)
  seg[:, 50:] = 2          # two packed documents
  seg[1, 100:] = 0         # and padding
  return q, k, v, masks.self_attention(jnp.asarray(seg), causal=causal)


@pytest.mark.parametrize("causal", [False, True])
def test_splash_matches_dense_attention_and_its_gradient(causal):
  q, k, v, mask = _inputs(causal)
  real = np.asarray(mask.segments != 0)[..., None, None]

  def out(impl):
    return lambda q, k, v: layers.attention(q, k, v, mask=mask, impl=impl)

  fused, dense = out("splash"), out("einsum")
  np.testing.assert_allclose(np.where(real, fused(q, k, v), 0),
                             np.where(real, dense(q, k, v), 0), atol=1e-5)
  loss = lambda f: lambda *a: (f(*a) * real).sum()
  for g_fused, g_dense in zip(
      jax.grad(loss(fused), argnums=(0, 1, 2))(q, k, v),
      jax.grad(loss(dense), argnums=(0, 1, 2))(q, k, v)):
    np.testing.assert_allclose(g_fused, g_dense, atol=1e-4)


def test_splash_refuses_what_it_cannot_compute():
  q, k, v, mask = _inputs(False)
  with pytest.raises(ValueError, match="splash attention needs"):
    layers.attention(q, k, v, mask=mask.dense, impl="splash")
  with pytest.raises(ValueError, match="splash attention needs"):
    layers.attention(q, k, v, mask=mask, bias=jnp.zeros((1, N, T, T)),
                     impl="splash")


def test_an_extra_mask_leaves_no_structure_to_read():
  seg = jnp.ones((1, 8), jnp.int32)
  assert isinstance(masks.self_attention(seg, causal=True), masks.Segmented)
  plain = masks.self_attention(seg, extra=jnp.ones((1, 8, 8), bool))
  assert isinstance(plain, jax.Array) and plain.shape == (1, 8, 8)


def test_the_tpu_train_step_compiles_with_the_splash_kernel():
  from configs import bert_mlm  # pylint: disable=import-outside-toplevel
  from zoo import plan  # pylint: disable=import-outside-toplevel
  from zoo.plan import chips  # pylint: disable=import-outside-toplevel

  def compiled(**model_args):
    c = bert_mlm.get_config("tiny")
    c.batch_size, c.seq_len = 8, 128
    c.mesh = {"data": -1, "fsdp": 2, "tensor": 1}
    c.model_args = dict(model_args, attention_dropout_rate=0.0)
    _, devices = chips.devices("v5e:2x2")
    lowered = plan.lower_step(c, devices)[0]
    return plan.compile_lowered(lowered)[0].as_text()

  # Packed documents (segment ids) in a sharded step: the Pallas kernel
  # is in the TPU program; forcing einsum leaves it out.
  assert "tpu_custom_call" in compiled()
  assert "tpu_custom_call" not in compiled(attention_impl="einsum")
