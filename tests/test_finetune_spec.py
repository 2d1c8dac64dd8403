"""zoo.finetune.spec: a head's width, and what a spec's identity holds."""

import dataclasses

import pytest

from data.tasks import Task
from zoo import models
from zoo.finetune import spec as spec_lib


def _spec(kind="class", labels=2, **kw):
  config = models.make_config("bert", "tiny")
  task = Task("t", kind, "accuracy", [str(i) for i in range(labels)], {})
  return dataclasses.replace(spec_lib.make_spec("bert", config, task), **kw)


@pytest.mark.parametrize("kind,labels,width", [
    ("class", 2, 8), ("pair", 8, 8), ("tags", 9, 16), ("class", 17, 24),
    ("regression", 0, 0), ("span", 0, 0)])
def test_class_and_tag_heads_round_up_to_the_label_width(kind, labels,
                                                         width):
  spec = _spec(kind, labels)
  assert (spec.num_labels, spec.head_width) == (labels, width)
  assert _spec(kind, labels, pad_labels=False).head_width == labels


def test_the_class_count_is_not_part_of_a_specs_identity():
  two, six = _spec(labels=2), _spec(labels=6)
  assert two == six and hash(two) == hash(six)
  assert two != _spec(labels=9)  # 16 wide
  assert two != _spec(labels=2, pad_labels=False)
  assert dataclasses.replace(six, num_labels=9).head_width == 16
