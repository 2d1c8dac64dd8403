"""CoVe: packed pairs split into source and target, the decoder reads its
own pair's source only, CoVe features, and translation loss on real
parallel text."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import objectives
from objectives import cove as scheme
from tests import objective_checks as testing
from zoo import models
from zoo.models import cove

# Two pairs (source sentence, then a target of one and of two sentences).
ROW = {"tokens": [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 0],
       "doc_ids": [1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 0],
       "sentence_ids": [1, 1, 2, 2, 2, 3, 4, 4, 5, 5, 0]}


def _batch():
  b = {k: jnp.asarray([v], jnp.int32) for k, v in ROW.items()}
  b["word_ids"] = jnp.arange(1, 12, dtype=jnp.int32)[None]
  b["phrase_ids"] = jnp.zeros((1, 11), jnp.int32)
  return b


def test_each_document_is_a_source_sentence_then_its_target():
  source, target, unit = scheme.pairs(_batch())
  np.testing.assert_array_equal(source[0], [1, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0])
  np.testing.assert_array_equal(target[0], [0, 0, 1, 1, 1, 0, 1, 1, 1, 1, 0])
  np.testing.assert_array_equal(unit[0], [1, 1, 2, 2, 2, 3, 4, 4, 4, 4, 0])


@pytest.fixture(scope="module")
def bound():
  obj = testing.build("cove_mt", "cove")
  params = nn.meta.unbox(obj.init(jax.random.key(0), _batch()))
  return obj, params


def test_decoder_reads_its_own_pairs_source_only(bound):
  obj, params = bound
  base = obj.run(params, obj.corrupt(_batch(), None), None, True)["logits"]
  tokens = np.asarray(ROW["tokens"])
  for t, changed_to in ((0, 40), (5, 41)):  # each pair's source
    b = _batch()
    b["tokens"] = jnp.asarray([np.where(np.arange(11) == t, changed_to,
                                        tokens)], jnp.int32)
    out = obj.run(params, obj.corrupt(b, None), None, True)["logits"]
    diff = np.abs(np.asarray(out - base)).max(-1)[0]
    own = (np.asarray(ROW["doc_ids"]) == ROW["doc_ids"][t]) & (
        np.asarray(ROW["sentence_ids"]) != ROW["sentence_ids"][t])
    assert np.all(diff[own] > 0), t  # its target reads it
    other = (np.asarray(ROW["doc_ids"]) != ROW["doc_ids"][t]) & (
        np.arange(11) < 10)
    assert np.all(diff[other] == 0), t  # the other pair does not


def test_features_are_the_table_vector_beside_the_top_bilstm(bound):
  obj, params = bound
  config = obj.config
  out = cove.Model(config).apply({"params": params["model"]},
                                 jnp.asarray([ROW["tokens"]]),
                                 return_logits=False)
  width = config.embed_dim + 2 * config.hidden_dim
  assert set(out) == {"hidden", "layers"}
  assert out["hidden"].shape == (1, 11, width)
  np.testing.assert_array_equal(
      out["hidden"][0, :, :config.embed_dim],
      params["model"]["token_embedding"][np.asarray(ROW["tokens"])])
  fresh = models.init_params("cove", config, jax.random.key(0), heads=False)
  assert not any(k.startswith("decoder") for k in fresh)


def test_needs_its_family():
  with pytest.raises(ValueError, match="needs the cove family"):
    objectives.build("cove_mt", "bert", "tiny", testing.SPECIALS)


def test_translation_loss_falls_on_the_parallel_text():
  """Held-out pairs of the parallel sample: the loss after 40 Adam steps on
  training pairs is well below the loss at init."""
  import optax  # pylint: disable=import-outside-toplevel
  from configs import cove_cove_mt  # pylint: disable=import-outside-toplevel
  from zoo import train_lib  # pylint: disable=import-outside-toplevel
  config = cove_cove_mt.get_config("tiny")
  loader = train_lib.build_loader(config, "train", 8, 0)
  obj = train_lib.build_objective(config, train_lib.specials_of(config,
                                                                loader))
  held = {k: jnp.asarray(v) for k, v in next(
      train_lib.build_loader(config, "validation", 8, 0)).items()}
  params = nn.meta.unbox(obj.init(jax.random.key(0), held))
  tx = optax.adam(1e-2)
  state = tx.init(params)
  loss = jax.jit(lambda p, b: obj.loss(p, b, jax.random.key(1), True)[0])

  @jax.jit
  def step(p, s, b):
    g = jax.grad(lambda q: obj.loss(q, b, jax.random.key(1), True)[0])(p)
    u, s = tx.update(g, s, p)
    return optax.apply_updates(p, u), s

  before = float(loss(params, held))
  for _ in range(40):
    batch = {k: jnp.asarray(v) for k, v in next(loader).items()}
    params, state = step(params, state, batch)
  after = float(loss(params, held))
  assert before > 8.5  # about log(8000) at init
  assert after < before - 2.0, (before, after)


def test_every_param_maps_onto_a_mesh():
  testing.assert_params_map_onto_mesh("cove_mt", "cove")
