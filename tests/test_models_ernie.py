"""zoo.models.ernie: the knowledgeable encoder's aggregators."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from data import linking
from tests import objective_checks as testing
from zoo import knowledge
from zoo import loading
from zoo import models
from zoo.models import ernie

T = 12


@pytest.fixture(scope="module")
def model():
  config = models.make_config("ernie", "tiny", dropout_rate=0.0,
                              attention_dropout_rate=0.0)
  params = models.init_params("ernie", config, jax.random.key(0), length=T)
  return ernie.Model(config), params


def _tokens():
  return jnp.asarray(np.random.default_rng(0).integers(7, 500, (2, T)),
                     jnp.int32)


def _entities(at, seed=1):
  vec = np.zeros((2, T, 16), np.float32)
  vec[:, at] = np.random.default_rng(seed).normal(size=(2, len(at), 16))
  return jnp.asarray(vec)


def test_one_aggregator_fuses_entities_only_at_linked_positions(model):
  mod, params = model
  tokens, at = _tokens(), [3, 7]
  plain = mod.apply({"params": params}, tokens)
  linked = mod.apply({"params": params}, tokens, entities=_entities(at))
  diff = np.abs(np.asarray(linked["hidden"] - plain["hidden"])).max(-1)
  assert (diff[:, at] > 1e-3).all()
  np.testing.assert_array_equal(np.delete(diff, at, axis=1), 0.0)
  other = mod.apply({"params": params}, tokens, entities=_entities(at, 2))
  assert np.abs(np.asarray(other["hidden"] - linked["hidden"]))[:, at].max(
      ) > 1e-3
  # Entity states exist only where an entity is.
  e = np.abs(np.asarray(linked["entity_hidden"])).max(-1)
  assert (e[:, at] > 0).all() and not np.delete(e, at, axis=1).any()


def test_deeper_aggregators_spread_knowledge_through_attention():
  config = models.make_config("ernie", "tiny", num_k_layers=2,
                              dropout_rate=0.0, attention_dropout_rate=0.0)
  params = models.init_params("ernie", config, jax.random.key(0), length=T)
  mod, tokens = ernie.Model(config), _tokens()
  plain = mod.apply({"params": params}, tokens)["hidden"]
  linked = mod.apply({"params": params}, tokens,
                     entities=_entities([3]))["hidden"]
  # Nonzero everywhere (small at init: near-uniform attention).
  assert (np.abs(np.asarray(linked - plain)).max(-1) > 1e-6).all()


def test_entities_attend_to_their_row_s_entities_only():
  has = jnp.asarray([[False, True, False, True, True]])
  seg = jnp.asarray([[1, 1, 1, 1, 2]])
  got = np.asarray(ernie.entity_mask(has, seg))[0]
  want = np.eye(5, dtype=bool)
  want[1, 3] = want[3, 1] = True  # position 4 is another document's
  np.testing.assert_array_equal(got, want)


def test_wrong_entity_width_is_named(model):
  mod, params = model
  with pytest.raises(ValueError, match="entity_dim 16"):
    mod.apply({"params": params}, _tokens(),
              entities=jnp.zeros((2, T, 10)))


def test_every_param_maps_onto_a_mesh():
  testing.assert_params_map_onto_mesh("ernie", "ernie")


def test_a_loaded_ernie_reads_the_entities_of_its_text(tok):
  # Two K-layers: a position's entity reaches the others through the
  # second layer's attention (with one, fusion is the last step, so the
  # [MASK] reads only its own, absent, entity).
  config = models.make_config("ernie", "tiny", vocab_size=tok.vocab_size,
                              num_k_layers=2)
  params = models.init_params("ernie", config, jax.random.key(0))
  loaded = loading.Loaded("ernie", config, params, tok, None, "",
                          run_config={"data": {"entities": "wordnet"}})
  tokens = loaded.batch(["a dog is a kind of <mask>."])
  vectors = np.asarray(loaded.entity_vectors(tokens))
  dog = list(tokens[0]).index(tok.encode(" dog")[0])
  linked = np.flatnonzero(np.abs(vectors[0]).sum(-1))
  assert dog in linked and tokens[0][linked].tolist() != []
  table = knowledge.entity_table("wordnet", knowledge.TransE(dim=16))
  entity = linking.linker("wordnet").link(["dog"])[0]
  np.testing.assert_array_equal(vectors[0, dog], table[entity])
  # The masked prediction reads them: the loader's logits are the model's
  # with these entities (to float rounding, ~1e-7), and the entities move
  # them (~1e-5 at init: the same program, only the entities differ).
  with_kb = loaded.mask_logits(["a dog is a kind of <mask>."])[0]
  mask = list(tokens[0]).index(tok.specials()["mask"])

  def run(entities):
    out = ernie.Model(config).apply({"params": params}, jnp.asarray(tokens),
                                    entities=entities)
    return np.asarray(out["logits"][0, mask])

  read, unread = run(jnp.asarray(vectors)), run(jnp.zeros_like(vectors))
  assert np.abs(read - unread).max() > 0
  np.testing.assert_allclose(with_kb, read, atol=2e-6)
  assert np.abs(with_kb - unread).max() > 2e-6
