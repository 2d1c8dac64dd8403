"""DistilBERT at tiny: output shapes, axes, sharded forward."""

import chex

from tests import model_checks as mc
from zoo import models


def test_outputs_axes_and_sharded_forward():
  config, model = models.make("distilbert", "tiny")
  x = mc.tokens()
  variables = mc.init(model, x)
  paths = mc.check_logical_axes(variables)
  assert not any("token_type" in p or "pooler" in p for p in paths)
  out = mc.sharded_equals_unsharded(model, variables, x)
  b, t, d = 4, 16, config.embed_dim
  chex.assert_shape(out["hidden"], (b, t, d))
  chex.assert_shape(out["logits"], (b, t, config.vocab_size))
  chex.assert_shape(list(out["layers"]), (b, t, d))
  assert len(out["layers"]) == config.num_layers + 1
  assert set(out) == {"hidden", "layers", "logits"}
