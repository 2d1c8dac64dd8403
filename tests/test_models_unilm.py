"""UniLM at tiny: per-example mask modes on BERT weights."""

import chex
import jax
import jax.numpy as jnp
import numpy as np

from tests import model_checks as mc
from zoo import models
from zoo.models import unilm


def test_mode_mask_rows():
  modes = jnp.array([unilm.BIDIRECTIONAL, unilm.LEFT_TO_RIGHT,
                     unilm.RIGHT_TO_LEFT, unilm.SEQ2SEQ])
  m = np.asarray(unilm.mode_mask(modes, jnp.array([0, 0, 0, 2]), 4))
  tril = np.tril(np.ones((4, 4), bool))
  np.testing.assert_array_equal(m[0], np.ones((4, 4), bool))
  np.testing.assert_array_equal(m[1], tril)
  np.testing.assert_array_equal(m[2], tril.T)
  np.testing.assert_array_equal(m[3], [[1, 1, 0, 0], [1, 1, 0, 0],
                                       [1, 1, 1, 0], [1, 1, 1, 1]])


def test_outputs_sharding_and_modes_change_visibility():
  config, model = models.make("unilm", "tiny")
  x = mc.tokens(pad_tail=0)
  modes = jnp.array([0, 1, 2, 3])
  src = jnp.array([0, 0, 0, 8])
  variables = mc.init(model, x, modes=modes, source_lengths=src)
  mc.check_logical_axes(variables)
  out = mc.sharded_equals_unsharded(model, variables, x, modes=modes,
                                    source_lengths=src)
  chex.assert_shape(out["hidden"], (4, 16, config.embed_dim))
  chex.assert_shape(out["logits"], (4, 16, config.vocab_size))
  fwd = jax.jit(lambda v, x: model.apply(v, x, modes=modes,
                                         source_lengths=src)["hidden"])
  params = mc.sharding.unbox(variables)
  moved = fwd(params, x.at[:, 10].set(9)) - out["hidden"]
  moved = np.abs(np.asarray(moved)).max(-1)  # [B, T]
  assert (moved[0] > 1e-4).all()  # bidirectional: everyone sees token 10
  assert (moved[1, :10] < 1e-5).all() and (moved[1, 10:] > 1e-4).all()
  assert (moved[2, 11:] < 1e-5).all() and (moved[2, :11] > 1e-4).all()
  # seq2seq: the source (0..7) and the target left of 10 do not move.
  assert (moved[3, :10] < 1e-5).all() and (moved[3, 10:] > 1e-4).all()


def test_bert_params_load_into_unilm():
  x = mc.tokens()
  shapes = lambda family, **kw: jax.tree.map(  # pylint: disable=g-long-lambda
      lambda a: (a.names, a.value.shape),
      jax.eval_shape(models.make(family, "tiny", **kw)[1].init,
                     jax.random.key(0), x)["params"],
      is_leaf=lambda a: hasattr(a, "names"))
  assert shapes("unilm") == shapes("bert", nsp_head=False)
