"""ALBERT at tiny: shapes, one shared block, factorised embeddings."""

import dataclasses

import chex
import jax
import jax.numpy as jnp
import numpy as np

from tests import model_checks as mc
from zoo import models


def test_outputs_axes_sharing_and_sharded_forward():
  config, model = models.make("albert", "tiny")
  x = mc.tokens()
  variables = mc.init(model, x)
  mc.check_logical_axes(variables)
  params = variables["params"]
  assert list(params["encoder"]) == ["layer"]  # one block for all layers
  table = params["embeddings"]["token"]["embedding"].value
  assert table.shape == (config.vocab_size, config.embedding_dim)
  out = mc.sharded_equals_unsharded(model, variables, x)
  b, t, d = 4, 16, config.embed_dim
  chex.assert_shape(out["hidden"], (b, t, d))
  chex.assert_shape(out["logits"], (b, t, config.vocab_size))
  chex.assert_shape(out["pooled"], (b, d))
  chex.assert_shape(out["sop_logits"], (b, 2))
  chex.assert_shape(list(out["layers"]), (b, t, d))
  assert len(out["layers"]) == config.num_layers + 1
  # Deeper with the same params: sharing means no new params appear.
  deeper = models.get("albert").Model(
      models.make_config("albert", "tiny", num_layers=5))
  shapes = jax.eval_shape(deeper.init, jax.random.key(0), x)
  chex.assert_trees_all_equal_shapes(
      jax.tree.map(lambda a: a.value, shapes["params"],
                   is_leaf=lambda a: hasattr(a, "value")),
      jax.tree.map(lambda a: a.value, params,
                   is_leaf=lambda a: hasattr(a, "value")))


def test_bert_input_options_apply():
  """ALBERT honours the BERT fields it inherits: trigram input reads the
  neighbours within a document, ALiBi changes the hidden states."""
  x = mc.tokens(batch=1, pad_tail=0)
  seg = jnp.array([[1] * 8 + [2] * 8], jnp.int32)
  config, model = models.make("albert", "tiny", trigram_input=True)
  variables = mc.init(model, x)
  assert "trigram_dense" in variables["params"]["embeddings"]
  embed = jax.jit(lambda v, x: model.apply(
      v, x, segment_ids=seg, return_logits=False)["layers"][0])
  changed = np.abs(np.asarray(embed(variables, x.at[0, 8].set(9))
                              - embed(variables, x))).max(-1)[0]
  assert changed[8] > 1e-4 and changed[9] > 1e-4
  assert changed[7] < 1e-6 and changed[10] < 1e-6
  alibi = models.get("albert").Model(dataclasses.replace(config, alibi=True))
  plain = model.apply(variables, x, return_logits=False)["hidden"]
  biased = alibi.apply(variables, x, return_logits=False)["hidden"]
  assert np.abs(np.asarray(biased - plain)).max() > 1e-3
