"""The training config's one frozen, typed view (`zoo.config.complete`)."""

import ml_collections
import pytest

from zoo import config as config_lib

MINIMAL = {"model": "bert", "objective": "mlm", "steps": 3, "batch_size": 8,
           "seq_len": 16}


def test_missing_keys_take_the_one_set_of_defaults():
  c = config_lib.complete(MINIMAL)
  base = config_lib.base_config()
  assert isinstance(c, ml_collections.FrozenConfigDict)
  assert (c.eval_steps, c.eval_every, c.seed) == (base.eval_steps,
                                                  base.eval_every, base.seed)
  assert c.optimizer.lr == base.optimizer.lr
  partial = config_lib.complete(dict(MINIMAL, optimizer={"lr": 0.5}))
  assert partial.optimizer.lr == 0.5
  assert partial.optimizer.warmup_steps == base.optimizer.warmup_steps
  with pytest.raises((AttributeError, TypeError, ValueError)):
    c.steps = 4  # frozen


@pytest.mark.parametrize("changes, words", [
    ({"model": None} , None),
    ({"stepz": 3}, "unknown config keys ['stepz']"),
    ({"steps": 2.5}, "config field steps=2.5 is a float"),
    ({"skip_nonfinite": "yes"}, "config field skip_nonfinite='yes' is a str"),
    ({"optimizer": {"lrr": 1.0}}, "unknown optimizer key 'lrr'"),
    ({"data": {"vocab_size": "big"}}, "config field data.vocab_size='big'"),
])
def test_bad_configs_name_the_field(changes, words):
  config = dict(MINIMAL, **changes)
  if words is None:  # a required key removed
    del config["model"]
    words = "config lacks the keys ['model']"
  with pytest.raises(ValueError, match=words.replace("[", r"\[").replace(
      "]", r"\]")):
    config_lib.complete(config)


def test_whole_numbers_and_ints_are_accepted_where_they_fit():
  c = config_lib.complete(dict(MINIMAL, steps=1e3, optimizer={"lr": 1}))
  assert c.steps == 1000 and isinstance(c.steps, int)
  assert c.optimizer.lr == 1.0 and isinstance(c.optimizer.lr, float)
