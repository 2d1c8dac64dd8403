"""objectives.head_loss: the chunked LM head and loss equal the whole
logits' `common.token_sums`, in value and gradient."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from objectives import common
from objectives import head_loss
from tests import objective_checks as testing


def _head(params, h):
  """A head with a bias; `unused` is a leaf it never reads."""
  return jnp.einsum("btd,vd->btv", h, params["table"]) + params["bias"]


def _problem(t=13, v=11, d=5, b=3, seed=0):
  k = jax.random.split(jax.random.key(seed), 5)
  params = {"table": jax.random.normal(k[0], (v, d)),
            "bias": jax.random.normal(k[1], (v,)),
            "unused": jax.random.normal(k[2], (7,))}
  hidden = jax.random.normal(k[3], (b, t, d))
  targets = jax.random.randint(k[4], (b, t), 0, v)
  weights = (jnp.arange(t) % 4 != 0)[None].repeat(b, 0).astype(jnp.float32)
  return params, hidden, targets, weights * 0.5  # float weights


@pytest.mark.parametrize("chunk", [1, 4, 13, 20])
def test_chunked_sums_equal_the_whole_logits(chunk):
  params, hidden, targets, weights = _problem()

  def whole(p, h):
    return common.token_sums(_head(p, h), targets, weights)

  def chunked(p, h):
    return head_loss.token_sums(_head, p, h, targets, weights, chunk)

  want, got = jax.jit(whole)(params, hidden), jax.jit(chunked)(params, hidden)
  for key in ("loss_sum", "weight_sum", "correct_sum"):
    np.testing.assert_allclose(got[key], want[key], rtol=1e-6, atol=1e-6)
  grad = lambda f: jax.jit(jax.grad(lambda p, h: f(p, h)["loss_sum"] * 3.0,
                                    argnums=(0, 1)))(params, hidden)
  (gp_want, gh_want), (gp_got, gh_got) = grad(whole), grad(chunked)
  np.testing.assert_allclose(gh_got, gh_want, rtol=1e-5, atol=1e-6)
  for key in ("table", "bias"):
    np.testing.assert_allclose(gp_got[key], gp_want[key], rtol=1e-5,
                               atol=1e-6)
  np.testing.assert_array_equal(gp_got["unused"], 0.0)


def test_a_chunk_must_hold_a_position():
  params, hidden, targets, weights = _problem()
  with pytest.raises(ValueError, match="chunk"):
    head_loss.token_sums(_head, params, hidden, targets, weights, 0)


# T5 with its own head (v1.1) and with the tied, scaled one (the original).
TIED = {"tie_embeddings": True, "scale_logits": True}


@pytest.mark.parametrize("name,family,args", [
    ("clm", "gpt2", {}), ("t5_span", "t5", {}), ("t5_span", "t5", TIED),
    ("bart", "bart", {})])
def test_the_chunked_head_trains_as_the_whole_logits(name, family, args):
  batch = testing.tiny_batch(seq_len=45)
  runs = {}
  for chunk in (0, 16):
    obj = testing.build(name, family, head_chunk=chunk, model_args=args)
    params = obj.init(jax.random.key(0), batch)
    loss = lambda p, o=obj: o.loss(p, batch, jax.random.key(1))
    runs[chunk] = (obj, jax.jit(jax.value_and_grad(loss, has_aux=True))(
        params))
  fused, whole = runs[16][0], runs[0][0]
  assert fused.fuses_head and not whole.fuses_head
  params = common.nn.meta.unbox(fused.init(jax.random.key(0), batch))
  inputs = fused.corrupt(common.as_batch(batch), jax.random.key(2))
  assert "logits" not in fused.run(params, inputs, None, True)
  (l0, m0), g0 = runs[0][1]
  (l1, m1), g1 = runs[16][1]
  np.testing.assert_allclose(l1, l0, rtol=1e-6)
  for key in ("weight_sum", "correct_sum"):
    assert m1[key] == m0[key]
  for a, b in zip(jax.tree.leaves(g0), jax.tree.leaves(g1)):
    np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)


def test_a_family_without_lm_logits_takes_the_whole_logits():
  obj = testing.build("clm", "bert", head_chunk=16)  # an MLM head
  assert not obj.fuses_head


@pytest.mark.parametrize("bad", [-1, 1.5, True, "8"])
def test_head_chunk_must_be_a_whole_number(bad):
  with pytest.raises(ValueError, match="head_chunk"):
    testing.build("clm", "gpt2", head_chunk=bad)


@pytest.mark.slow
def test_a_data_parallel_step_through_the_chunked_head_moves_no_rows():
  """The chunks split positions, never rows: on a mesh sharding the rows,
  the only collective is the gradient's all-reduce."""
  obj = testing.build("clm", "gpt2", head_chunk=16)
  assert len(jax.devices()) > 1
  assert testing.data_parallel_collectives(obj) == {"all-reduce"}
