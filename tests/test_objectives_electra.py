"""electra: sampled replacements, RTD labels, backbone, training."""

import jax
import numpy as np
import pytest

from objectives import common
from tests import objective_checks as testing
from zoo import models


@pytest.mark.slow
def test_electra_trains_and_exposes_the_discriminator():
  batch = testing.tiny_batch()
  obj = testing.build("electra", "electra")
  assert obj.interface == "pair"
  out = testing.check(obj, batch, uniform=False, steps=30)
  m = out["metrics"]
  testing.assert_near_uniform(m["mlm_loss_sum"] / m["mlm_weight_sum"])
  assert m["rtd_weight_sum"] == float(np.asarray(batch["doc_ids"] > 0).sum())
  # The backbone runs as a plain discriminator Model.
  params = obj.init(jax.random.key(0), batch)
  family, config, disc = obj.backbone(params)
  model = models.get(family).Model(config)
  scores = model.apply({"params": disc}, batch["tokens"])["logits"]
  assert scores.shape == batch["tokens"].shape


@pytest.mark.slow
def test_replacements_are_sampled_at_masked_positions_only():
  batch = testing.tiny_batch(seq_len=64, batch_size=8)
  obj = testing.build("electra", "electra")
  params = common.nn.meta.unbox(obj.init(jax.random.key(0), batch))
  inputs = obj.corrupt(batch, jax.random.key(1))
  out = jax.jit(obj.run, static_argnums=3)(params, inputs,
                                           jax.random.key(2), True)
  replaced, mask = np.asarray(out["replaced"]), np.asarray(inputs["mask"])
  assert not (replaced & ~mask).any()
  # An untrained generator is near uniform: nearly every sample differs.
  assert replaced[mask].mean() > 0.9


def test_electra_needs_a_pair():
  with pytest.raises(ValueError, match="Pair"):
    testing.build("electra", "bert")


@pytest.mark.slow
def test_generator_loss_at_gathered_slots_equals_full_logits():
  batch = testing.tiny_batch()
  obj = testing.build("electra", "electra", model_args={"dropout_rate": 0.1})
  params = common.nn.meta.unbox(jax.jit(obj.init)(jax.random.key(0), batch))
  rng = jax.random.key(3)
  _, got = jax.jit(obj.loss)(params, batch, rng)
  k_noise, k_drop, _ = jax.random.split(rng, 3)
  inputs = obj.corrupt(common.as_batch(batch), k_noise)
  gen = obj.pair.apply(
      {"params": params["model"]}, inputs["inputs"], method="generator",
      segment_ids=inputs["doc_ids"], positions=inputs["positions"],
      deterministic=False,
      rngs={"dropout": jax.random.split(k_drop, 3)[0]})
  want = common.token_sums(gen["logits"], inputs["tokens"], inputs["mask"])
  assert float(want["weight_sum"]) > 0
  for key in ("loss_sum", "weight_sum", "correct_sum"):
    np.testing.assert_allclose(float(got["mlm_" + key]), float(want[key]),
                               rtol=2e-6, err_msg=key)


@pytest.mark.slow
def test_loss_is_mlm_plus_fifty_times_rtd():
  batch = testing.tiny_batch()
  obj = testing.build("electra", "electra")
  params = obj.init(jax.random.key(0), batch)
  loss, m = obj.loss(params, batch, jax.random.key(1), deterministic=True)
  mlm = m["mlm_loss_sum"] / m["mlm_weight_sum"]
  rtd = m["rtd_loss_sum"] / m["rtd_weight_sum"]
  np.testing.assert_allclose(float(loss), float(mlm + 50.0 * rtd),
                             rtol=1e-5)
