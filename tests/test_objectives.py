"""The scheme registry and the objective call (`objectives/__init__.py`)."""

import jax
import numpy as np
import pytest

import objectives
from configs.compare import family
from objectives import common
from tests import objective_checks as testing


def test_every_scheme_is_registered_under_its_own_name():
  for name in objectives.names():
    cls = type(objectives.build(name, family.family_of(name), "tiny",
                                testing.SPECIALS))
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
