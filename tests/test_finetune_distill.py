"""Task distillation in fine-tuning (a teacher's soft labels) and pruning
while fine-tuning."""

import dataclasses

import jax
import numpy as np
import pytest

import test_finetune as ft
from zoo.compress import magnitude
from zoo.finetune import arrays as finetune_arrays
from zoo.finetune import distill
from zoo.finetune import steps as finetune_steps

pytestmark = pytest.mark.slow  # fine-tuning runs: not the quick lane


@pytest.fixture(scope="module")
def topic():
  return ft._task("topic", "class", "accuracy", ["animal", "vehicle"],  # pylint: disable=protected-access
                  ft._topic_examples)  # pylint: disable=protected-access


@pytest.fixture(scope="module")
def teacher(tok, topic):
  """A BERT fine-tuned from scratch on the topic task, and its State."""
  return ft._run(tok, topic, "bert", None, "full", steps=100)  # pylint: disable=protected-access


def _train_arrays(tok, spec, task):
  return finetune_arrays.split_arrays(spec, task.train, tok,
                                      {"inputs": 16, "targets": 32})


def test_soft_labels_are_the_teachers_logits_on_every_row(tok, topic,
                                                          teacher):
  state = teacher[1]
  arrays = _train_arrays(tok, state.spec, topic)
  got = distill.soft_logits(state, arrays, batch_size=48)  # 256 = 5*48 + 16
  batch = {k: arrays[k] for k in ("tokens", "token_types") if k in arrays}
  want = finetune_steps.logits_step(state.spec, state.params, batch)
  assert got.shape == (256, 2)
  np.testing.assert_allclose(got, want, atol=1e-5)


def test_head_loss_mixes_soft_and_gold_labels_as_written(tok, topic,
                                                         teacher):
  state = teacher[1]
  spec = dataclasses.replace(state.spec, soft_weight=0.25, temperature=2.0,
                             head_dropout=0.0, config=dataclasses.replace(
                                 state.spec.config, dropout_rate=0.0,
                                 attention_dropout_rate=0.0))
  arrays = _train_arrays(tok, spec, topic)
  batch = {k: v[:8] for k, v in arrays.items() if k != "word_pos"}
  batch["soft_logits"] = np.random.default_rng(0).normal(
      size=(8, 2)).astype(np.float32) * 3
  got = float(finetune_steps.head_loss(spec, state.params, batch,
                                       jax.random.key(0)))
  z = np.asarray(finetune_steps.logits_step(spec, state.params, batch),
                 np.float64)
  log_softmax = lambda x: x - np.log(np.exp(x).sum(-1, keepdims=True))
  gold = -np.take_along_axis(log_softmax(z), batch["label"][:, None],
                             1).mean()
  p_t = np.exp(log_softmax(batch["soft_logits"] / 2.0))
  kl = (p_t * (np.log(p_t) - log_softmax(z / 2.0))).sum(-1).mean() * 4.0
  assert got == pytest.approx(0.25 * kl + 0.75 * gold, rel=1e-4)


def test_a_narrow_student_learns_from_soft_labels_only(tok, topic, teacher):
  config = ft._config(tok, embed_dim=32, mlp_dim=64, num_layers=1)  # pylint: disable=protected-access
  metrics, state = ft._run(tok, topic, "bert", None, "full", config=config,  # pylint: disable=protected-access
                           steps=100, teacher=teacher[1], soft_weight=1.0)
  assert state.spec.soft_weight == 1.0
  assert teacher[0]["validation/accuracy"] > 80
  assert metrics["validation/accuracy"] > 80


def test_a_teacher_of_another_task_is_refused(tok, topic, teacher):
  tags = ft._task("tags", "tags", "accuracy", ["A", "V", "F"],  # pylint: disable=protected-access
                  ft._tag_examples)  # pylint: disable=protected-access
  with pytest.raises(ValueError, match="teacher was fine-tuned"):
    ft._run(tok, tags, "bert", None, "full", steps=2, teacher=teacher[1])  # pylint: disable=protected-access


def test_finetune_prunes_to_its_target(tok, topic):
  prune = magnitude.Config(target=0.5, begin_step=0, end_step=20,
                           frequency=5)
  metrics, state = ft._run(tok, topic, "bert", None, "full", steps=30,  # pylint: disable=protected-access
                           prune=prune)
  got = magnitude.sparsity(state.params["backbone"])
  assert got["all"] == pytest.approx(0.5, abs=0.01)
  assert all(0.49 <= f <= 0.51 for f in got["tensors"].values()), got
  assert np.isfinite(metrics["train/loss"])
  # A pruned head is exactly C wide: padding would count as pruned weights.
  assert state.params["head"]["classify"]["out"]["kernel"].shape[-1] == 2
  head = magnitude.sparsity(state.params["head"])["tensors"]
  assert head["classify/out/kernel"] == pytest.approx(0.5, abs=0.01)
