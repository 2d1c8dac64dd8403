"""Config argument strings (`configs/x.py:key=value,...`) set typed fields."""

import pytest

from configs import common


def _config(arg):
  return common.finish(common.base_config(), arg)


def test_booleans_read_both_ways():
  assert _config("skip_nonfinite=False").skip_nonfinite is False
  assert _config("skip_nonfinite=true").skip_nonfinite is True
  assert _config("skip_nonfinite=0").skip_nonfinite is False


def test_numbers_keep_their_field_type():
  c = _config("steps=1e3,seq_len=64")
  assert c.steps == 1000 and isinstance(c.steps, int)
  assert c.seq_len == 64


@pytest.mark.parametrize("arg, field", [
    ("skip_nonfinite=maybe", "skip_nonfinite"),
    ("steps=12.5", "steps"),
    ("steps=many", "steps"),
])
def test_a_value_the_field_cannot_hold_names_the_field(arg, field):
  with pytest.raises(ValueError, match=field):
    _config(arg)


def test_none_fields_take_none_or_a_number():
  assert common.typed("x", None, "none") is None
  assert common.typed("x", None, "3") == 3
  assert common.typed("x", None, "0.5") == 0.5
  assert common.typed("x", None, "word") == "word"


def test_unknown_key_is_refused():
  with pytest.raises(ValueError, match="not a config key"):
    _config("no_such_key=1")


def test_model_args_take_the_type_of_the_family_field():
  c = _config("tiny,model_args.num_layers=4,model_args.scan_layers=yes,"
              "model_args.dropout_rate=0")
  assert dict(c.model_args) == {"num_layers": 4, "scan_layers": True,
                                "dropout_rate": 0.0}
  assert isinstance(c.model_args.dropout_rate, float)
  with pytest.raises(ValueError, match="model_args.scan_layers"):
    _config("model_args.scan_layers=maybe")
  with pytest.raises(ValueError, match="not a field of bert's Config"):
    _config("model_args.no_such_field=1")


def test_block_keys_take_their_type_and_unknown_ones_are_named():
  c = _config("optimizer.lr=1e-3,optimizer.warmup_steps=70,data.source=speech")
  assert c.optimizer.lr == 1e-3 and c.optimizer.warmup_steps == 70
  assert isinstance(c.optimizer.warmup_steps, int)
  assert c.data.source == "speech"
  with pytest.raises(ValueError, match="optimizer has no key 'lrr'"):
    _config("optimizer.lrr=1")
