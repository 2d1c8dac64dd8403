"""GPT-2 at tiny: output shapes, axes, sharding, causality."""

import chex
import jax
import numpy as np

from tests import model_checks as mc
from zoo import models


def test_outputs_axes_and_sharded_forward():
  config, model = models.make("gpt2", "tiny")
  x = mc.tokens()
  variables = mc.init(model, x)
  mc.check_logical_axes(variables)
  out = mc.sharded_equals_unsharded(model, variables, x)
  b, t, d = 4, 16, config.embed_dim
  chex.assert_shape(out["hidden"], (b, t, d))
  chex.assert_shape(out["logits"], (b, t, config.vocab_size))
  chex.assert_shape(list(out["layers"]), (b, t, d))
  assert len(out["layers"]) == config.num_layers + 1 and "pooled" not in out


def test_future_tokens_and_other_documents_are_invisible():
  _, model = models.make("gpt2", "tiny")
  x = mc.tokens(batch=1, pad_tail=0)
  seg = np.array([[1] * 10 + [2] * 6], np.int32)
  variables = mc.init(model, x)
  fwd = jax.jit(lambda v, x: model.apply(v, x, segment_ids=seg)["logits"])
  base = fwd(variables, x)
  moved = fwd(variables, x.at[0, 6].set(11))
  np.testing.assert_allclose(moved[0, :6], base[0, :6], atol=1e-6)
  assert np.abs(moved[0, 6:10] - base[0, 6:10]).max() > 1e-4
  np.testing.assert_allclose(moved[0, 10:], base[0, 10:], atol=1e-6)


def test_logits_at_positions_equal_the_full_logits_there():
  _, model = models.make("gpt2", "tiny")
  x = mc.tokens()
  variables = mc.init(model, x)
  full = model.apply(variables, x)["logits"]
  at = np.array([[0, 3, 3], [15, 1, 2], [7, 8, 9], [4, 0, 11]], np.int32)
  some = model.apply(variables, x, logits_at=at)["logits"]
  chex.assert_shape(some, (4, 3, full.shape[-1]))
  np.testing.assert_allclose(
      some, np.take_along_axis(np.asarray(full), at[..., None], 1),
      atol=1e-5)
