"""Quantisation-aware fine-tuning (Q8BERT) through `zoo.finetune`."""

import dataclasses

import jax
import numpy as np
import pytest

import test_finetune as ft
from zoo.compress import quant
from zoo.finetune import arrays as finetune_arrays
from zoo.finetune import steps as finetune_steps

pytestmark = pytest.mark.slow  # fine-tuning runs: not the quick lane


def test_quantisation_aware_fine_tuning_learns_and_exports(tok):
  topic = ft._task("topic", "class", "accuracy", ["animal", "vehicle"],  # pylint: disable=protected-access
                   ft._topic_examples)  # pylint: disable=protected-access
  metrics, state = ft._run(tok, topic, "bert", None, "full", steps=100,  # pylint: disable=protected-access
                           quant=quant.QuantConfig(ema_decay=0.9))
  assert metrics["validation/accuracy"] > 80
  stats = state.params[quant.STATS]
  leaves = jax.tree.leaves(stats)
  assert leaves and all(float(x) > 0 for x in leaves)
  # Evaluation ran quantised: the float model of the same params gives
  # other logits, with mostly the same answers.
  arrays = finetune_arrays.split_arrays(state.spec, topic.validation, tok,
                                        {"inputs": 16, "targets": 32})
  batch = {"tokens": arrays["tokens"][:32]}
  fake = finetune_steps.logits_step(state.spec, state.params, batch)
  plain = finetune_steps.logits_step(
      dataclasses.replace(state.spec, quant=None), state.params, batch)
  assert 0 < float(np.abs(fake - plain).max()) < 1.0
  assert (np.argmax(fake, -1) == np.argmax(plain, -1)).mean() > 0.9
  exported = quant.quantize_params(state.params["backbone"], stats)
  kernels = [x for x in jax.tree.leaves(exported["params"])
             if x.dtype == np.int8]
  assert kernels, "no int8 kernel in the export"


def test_text_to_text_backbones_are_refused(tok):
  topic = ft._task("topic", "class", "accuracy", ["animal", "vehicle"],  # pylint: disable=protected-access
                   ft._topic_examples)  # pylint: disable=protected-access
  with pytest.raises(ValueError, match="quantisation-aware"):
    ft._run(tok, topic, "t5", None, "full", steps=2,  # pylint: disable=protected-access
            quant=quant.QuantConfig())
