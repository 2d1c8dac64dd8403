"""The scheme registry and the objective call (`objectives/__init__.py`)."""

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import objectives
from configs.compare import family
from objectives import common
from tests import objective_checks as testing
from zoo import models


def test_every_scheme_is_registered_under_its_own_name():
  # Distillation schemes bind to a teacher (read only when they run).
  teacher = collections.namedtuple("Teacher", "family config params")(
      "bert", models.make_config("bert", "tiny",
                                 vocab_size=testing.SPECIALS.vocab_size), None)
  for name in objectives.names():
    extra = ({"teacher": teacher} if name in family.TEACHER_SCHEMES else {})
    model = "bert" if extra else family.family_of(name)
    cls = type(objectives.build(name, model, "tiny", testing.SPECIALS,
                                **extra))
    assert cls.name == objectives.aliases().get(name, name)


def test_a_second_scheme_of_one_name_is_refused():
  objectives.names()
  taken = type("Clash", (common.Scheme,), {"name": "mlm"})
  with pytest.raises(ValueError, match="'mlm' registered twice"):
    objectives.register(taken)
  with pytest.raises(ValueError, match="no scheme name"):
    objectives.register(type("Nameless", (common.Scheme,), {}))


def test_unknown_names_list_the_registered_ones():
  with pytest.raises(ValueError, match="unknown objective 'mln'.*'mlm'"):
    objectives.build("mln", "bert", "tiny", testing.SPECIALS)


def test_the_objective_is_the_loss_function():
  batch = testing.tiny_batch()
  obj = testing.build("mlm", "bert")
  params = obj.init(jax.random.key(0), batch)
  rng = jax.random.key(1)
  called, _ = obj(params, batch, rng)
  loss, _ = obj.loss(params, batch, rng)
  np.testing.assert_array_equal(np.asarray(called), np.asarray(loss))


def test_token_sums_are_cross_entropy_and_argmax_accuracy():
  logits = jax.random.normal(jax.random.key(0), (3, 5, 11)) * 4
  targets = jax.random.randint(jax.random.key(1), (3, 5), 0, 11)
  targets = targets.at[0].set(jnp.argmax(logits[0], -1))  # some hits
  weights = jax.random.bernoulli(jax.random.key(2), 0.7, (3, 5))
  got = common.token_sums(logits, targets, weights)
  lp = np.asarray(jax.nn.log_softmax(logits, -1))
  nll = -np.take_along_axis(lp, np.asarray(targets)[..., None], -1)[..., 0]
  hit = np.asarray(jnp.argmax(logits, -1) == targets)
  w = np.asarray(weights, np.float32)
  np.testing.assert_allclose(got["loss_sum"], (nll * w).sum(), rtol=1e-5)
  assert float(got["weight_sum"]) == w.sum()
  assert float(got["correct_sum"]) == (hit * w).sum() >= 1
  grad = jax.grad(lambda x: common.token_sums(x, targets, weights)[
      "loss_sum"])(logits)
  want = (np.exp(lp) - np.eye(11)[np.asarray(targets)]) * w[..., None]
  np.testing.assert_allclose(grad, want, atol=1e-5)
