"""ELECTRA at tiny: the discriminator Model and the shared-embedding Pair."""

import chex
import jax
import numpy as np

from tests import model_checks as mc
from zoo import models
from zoo.models import electra


def test_discriminator_outputs_axes_and_sharded_forward():
  config, model = models.make("electra", "tiny")
  x = mc.tokens()
  variables = mc.init(model, x)
  mc.check_logical_axes(variables)
  out = mc.sharded_equals_unsharded(model, variables, x)
  b, t, d = 4, 16, config.embed_dim
  chex.assert_shape(out["hidden"], (b, t, d))
  chex.assert_shape(out["logits"], (b, t))
  chex.assert_shape(list(out["layers"]), (b, t, d))
  assert len(out["layers"]) == config.num_layers + 1


def test_pair_shares_embeddings_and_scales_the_generator():
  config = models.make_config("electra", "tiny")
  pair = electra.Pair(config)
  x = mc.tokens()
  variables = mc.init(pair, x)
  mc.check_logical_axes(variables)
  params = variables["params"]
  assert set(params) == {"embeddings", "generator_body",
                         "discriminator_body"}
  gen_d = config.generator().embed_dim
  assert gen_d == int(config.embed_dim * config.generator_fraction)

  @jax.jit
  def run(v):
    gen, disc = pair.apply(v, x)
    # The generator's MLM logits move when the shared table moves.
    emb = v["params"]["embeddings"]["token"]["embedding"]
    bumped = jax.tree.map(lambda a: a, v)
    bumped["params"]["embeddings"]["token"]["embedding"] = emb * 1.5
    return gen, disc, pair.apply(bumped, x, method="generator")["logits"]

  gen, disc, bumped_logits = run(mc.sharding.unbox(variables))
  chex.assert_shape(gen["hidden"], (4, 16, gen_d))
  chex.assert_shape(gen["logits"], (4, 16, config.vocab_size))
  chex.assert_shape(disc["logits"], (4, 16))
  assert np.abs(bumped_logits - gen["logits"]).max() > 1e-4
