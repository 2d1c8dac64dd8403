"""zoo.precision: the compute dtype policy per backend, and its override."""

import pytest

from configs import bert_mlm
from zoo import precision
from zoo import train_lib
import objectives


@pytest.mark.parametrize("platform, dtype", [
    ("cpu", "float32"), ("tpu", "bfloat16"), ("gpu", "bfloat16")])
def test_policy_by_backend(platform, dtype):
  assert precision.default_dtype(platform) == dtype


def test_an_explicit_dtype_wins_and_cpu_adds_nothing():
  assert precision.resolve({}, "cpu") == {}
  assert precision.resolve({"dropout_rate": 0.0}, "tpu") == {
      "dropout_rate": 0.0, "dtype": "bfloat16"}
  assert precision.resolve({"dtype": "float32"}, "tpu") == {
      "dtype": "float32"}


@pytest.mark.parametrize("platform, args, dtype", [
    ("cpu", {}, "float32"), ("tpu", {}, "bfloat16"),
    ("tpu", {"dtype": "float32"}, "float32")])
def test_the_trainer_builds_its_model_in_the_policy_dtype(platform, args,
                                                          dtype):
  c = bert_mlm.get_config("tiny")
  c.model_args = args
  objective = train_lib.build_objective(
      c, objectives.Specials(vocab_size=512), platform=platform)
  assert objective.config.dtype == dtype
