"""Text-to-text fine-tuning: decoders and encoder-decoders learn label
strings by teacher forcing, share one compiled step across tasks, and
answer class tasks by rank classification over the label strings."""

import random

import jax
import numpy as np
import pytest

from test_finetune import ANIMALS, FILLER, _config, _run, _task
# The topic task's fixture, shared with the head tests.
from test_finetune import topic  # pylint: disable=unused-import
from zoo import finetune
from zoo import models
from zoo.finetune import arrays as finetune_arrays
from zoo.finetune import evaluate as finetune_eval
from zoo.finetune import steps as finetune_steps

pytestmark = pytest.mark.slow  # minutes of training runs: not the quick lane


QUESTION_TYPES = ["ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM"]


def _keyword_examples(n, seed):
  """One keyword names one of six several-piece labels; the rest is filler."""
  r = random.Random(seed)
  out = []
  for _ in range(n):
    label = r.randrange(len(QUESTION_TYPES))
    words = [ANIMALS[label]] + r.sample(FILLER, 4)
    r.shuffle(words)
    text = " ".join(words)
    out.append(dict(inputs=f"type: {text}", text=text, label=label,
                    targets=QUESTION_TYPES[label]))
  return out


def test_text_to_text_rows_teacher_force_the_target_then_eos(tok):
  task = _task("kw", "class", "accuracy", QUESTION_TYPES, _keyword_examples)
  examples = task.validation[:8]
  ids = finetune_arrays.Ids.of(tok)
  gold = [tok.encode(ex["targets"]) + [ids.eos] for ex in examples]
  enc = finetune_arrays.encdec_arrays(examples, tok, inputs_len=16,
                                    targets_len=6, start_id=17)
  dec = finetune_arrays.decoder_arrays(examples, tok, prompt_len=16,
                                     targets_len=6)
  for i, y in enumerate(gold):
    n = len(y)
    assert enc["targets"][i, :n].tolist() == y
    assert enc["dec_tokens"][i, :n].tolist() == [17] + y[:-1]
    assert enc["weights"][i].tolist() == [1.0] * n + [0.0] * (6 - n)
    assert enc["enc_tokens"][i][enc["enc_tokens"][i] != ids.pad][-1] == ids.eos
    # Decoder: weights mark exactly the positions whose next id is y.
    w = dec["weights"][i] > 0
    assert dec["targets"][i][w].tolist() == y
    assert dec["tokens"][i, 1:][w[:-1]].tolist() == y
    prompt = dec["prompt"][i][dec["prompt"][i] != ids.pad].tolist()
    assert prompt[-1] == ids.sep
    assert dec["tokens"][i, :len(prompt)].tolist() == prompt
    assert dec["tokens"][i, len(prompt):len(prompt) + n].tolist() == y
    assert dec["prompt"][i, -1] == ids.sep  # left-padded: sep is last


def test_encdec_learns_several_piece_labels_from_scratch(tok):
  """Six labels of 3-4 pieces each, keyed by one input word: chance is ~17%
  and a working encoder-decoder gets (nearly) all of them."""
  task = _task("kw", "class", "accuracy", QUESTION_TYPES, _keyword_examples)
  assert all(len(tok.encode(t)) >= 3 for t in QUESTION_TYPES)
  metrics, state = _run(tok, task, "t5", None, "full", steps=200, lr=2e-3,
                        splits=("validation",),
                        config=_config(tok, "t5", dropout_rate=0.0))
  assert metrics["validation/accuracy"] > 90
  assert np.mean(state.losses[-5:]) < 0.2


def test_text_to_text_tasks_share_one_compiled_step(tok, topic):
  """Label sets and target lengths differ; the jitted step does not."""
  keyword = _task("kw", "class", "accuracy", QUESTION_TYPES,
                  _keyword_examples)
  config = _config(tok, "t5")
  kw = dict(steps=2, splits=(), max_target_len=8, config=config)
  _run(tok, topic, "t5", None, "full", **kw)
  compiled = finetune_steps.train_steps._cache_size()
  _run(tok, keyword, "t5", None, "full", **kw)
  assert finetune_steps.train_steps._cache_size() == compiled
  other = finetune.make_spec("t5", config, keyword, steps=2)
  assert other == finetune.make_spec("t5", config, topic, steps=2)


def test_decoder_loss_at_target_positions_equals_full_logits_loss(tok):
  task = _task("kw", "class", "accuracy", QUESTION_TYPES, _keyword_examples)
  config = _config(tok, "gpt2", dropout_rate=0.0, attention_dropout_rate=0.0)
  spec = finetune.make_spec("gpt2", config, task)
  arrays = finetune_arrays.decoder_arrays(task.train[:6], tok, prompt_len=12,
                                        targets_len=6)
  at = arrays["target_pos"]
  weights = arrays["weights"]
  assert weights.sum() == np.take_along_axis(weights, at, 1).sum()
  params = finetune.init_params(spec, None, 18, jax.random.key(0))
  batch = {k: v for k, v in arrays.items() if k != "prompt"}
  loss = finetune_steps.text_loss(spec, params, batch, jax.random.key(1))
  model = models.get("gpt2").Model(config)
  logits = model.apply({"params": params["backbone"]}, arrays["tokens"],
                       segment_ids=arrays["segment_ids"])["logits"]
  logp = jax.nn.log_softmax(np.asarray(logits, np.float64))
  nll = -np.take_along_axis(np.asarray(logp), arrays["targets"][..., None],
                            -1)[..., 0]
  full = (nll * weights).sum() / weights.sum()
  np.testing.assert_allclose(float(loss), full, rtol=1e-5)


def test_text_scores_map_exact_label_strings_only(topic):
  examples = topic.validation[:20]
  gold = [ex["targets"] for ex in examples]
  right = finetune_eval.text_scores(topic, examples, [f" {t} " for t in gold])
  assert right["accuracy"] == 100.0
  # A near-miss names no label: it is wrong, never silently class 0.
  near = finetune_eval.text_scores(topic, examples, [t + "s" for t in gold])
  assert near["accuracy"] == 0.0
  flipped = ["vehicle" if t == "animal" else "animal" for t in gold]
  assert finetune_eval.text_scores(topic, examples, flipped)["accuracy"] == 0


def _manual_label_log_prob(spec, params, tok, example, label):
  """log p(label eos | inputs) of an encoder-decoder by one plain forward
  pass."""
  ids = finetune_arrays.Ids.of(tok)
  enc = np.asarray([tok.encode(example["inputs"]) + [ids.eos]], np.int32)
  tgt = tok.encode(label) + [ids.eos]
  start = getattr(spec.config, "decoder_start_id", spec.config.pad_id)
  dec = np.asarray([[start] + tgt[:-1]], np.int32)
  logits = models.get(spec.family).Model(spec.config).apply(
      {"params": params["backbone"]}, enc, dec)["logits"][0]
  logp = jax.nn.log_softmax(logits)
  return float(sum(logp[i, t] for i, t in enumerate(tgt))), len(tgt)


@pytest.mark.parametrize("family", ["t5", "bart"])
def test_rank_classification_picks_the_most_likely_label(tok, topic, family):
  """Scores over one encoding of each batch's inputs (5 examples in
  batches of 4: one padded) equal whole forward passes, label by label."""
  from zoo.finetune import rank  # pylint: disable=import-outside-toplevel
  config = _config(tok, family, dropout_rate=0.0)
  spec = finetune.make_spec(family, config, topic)
  params = finetune.init_params(spec, None, 16, jax.random.key(3))
  labels = ["animal", "vehicle", "a much longer label"]
  examples = topic.validation[:5]
  lengths = {"inputs": 16, "targets": 8}
  scores = rank.label_scores(spec, params, examples, labels, tok, lengths,
                             batch_size=4)
  summed = rank.label_scores(spec, params, examples, labels, tok, lengths,
                             batch_size=4, length_norm=False)
  for i, ex in enumerate(examples):
    for c, label in enumerate(labels):
      total, count = _manual_label_log_prob(spec, params, tok, ex, label)
      np.testing.assert_allclose(summed[i, c], total, rtol=1e-4, atol=1e-4)
      np.testing.assert_allclose(scores[i, c], total / count, rtol=1e-4,
                                 atol=1e-4)
  preds = rank.rank_predictions(spec, params, examples, labels, tok, lengths,
                                batch_size=4)
  assert preds.tolist() == np.argmax(scores, 1).tolist()


def _decoder_label_log_prob(spec, params, tok, example, label, lengths):
  """log p(label eos | inputs [sep]) of a decoder by one plain forward pass
  of its own row, as `decoder_arrays` truncates it."""
  ids = finetune_arrays.Ids.of(tok)
  prompt_len = lengths["inputs"] - lengths["targets"]
  prompt = tok.encode(example["inputs"])[:prompt_len - 1] + [ids.sep]
  tgt = tok.encode(label)[:lengths["targets"] - 1] + [ids.eos]
  row = np.asarray([prompt + tgt], np.int32)
  logits = models.get(spec.family).Model(spec.config).apply(
      {"params": params["backbone"]}, row)["logits"][0]
  logp = jax.nn.log_softmax(logits)
  return (float(sum(logp[len(prompt) - 1 + i, t] for i, t in enumerate(tgt))),
          len(tgt))


def test_a_decoder_ranks_every_label_after_one_copy_of_the_prompt(
    tok, topic, monkeypatch):
  """GPT-2's label scores from rows of one prompt and a block per label
  (5 examples in batches of 4: one padded; a label cut at T pieces) equal
  a plain forward pass of each label's own row, and the rows per label
  that a decoder without an attention mask runs."""
  from zoo.finetune import rank  # pylint: disable=import-outside-toplevel
  config = _config(tok, "gpt2", dropout_rate=0.0, attention_dropout_rate=0.0)
  spec = finetune.make_spec("gpt2", config, topic)
  params = finetune.init_params(spec, None, 24, jax.random.key(5))
  labels = ["animal", "vehicle", "a much longer label than eight pieces can "
            "hold at all"]
  examples = topic.validation[:5]
  lengths = {"inputs": 24, "targets": 8}
  arrays = finetune_arrays.shared_prompt_arrays(
      examples, labels, tok, prompt_len=16, targets_len=8)
  assert arrays["targets"].shape == (5, 3, 8)  # the cut label is L = T
  assert arrays["tokens"].shape == (5, 16 + 3 * 7)
  calls, shared = [], rank.shared_log_probs
  monkeypatch.setattr(rank, "shared_log_probs",
                      lambda *a: calls.append(1) or shared(*a))
  summed = rank.label_scores(spec, params, examples, labels, tok, lengths,
                             batch_size=4, length_norm=False)
  scores = rank.label_scores(spec, params, examples, labels, tok, lengths,
                             batch_size=4)
  assert len(calls) == 4  # two batches, twice: the shared rows ran
  for i, ex in enumerate(examples):
    for c, label in enumerate(labels):
      total, count = _decoder_label_log_prob(spec, params, tok, ex, label,
                                             lengths)
      np.testing.assert_allclose(summed[i, c], total, rtol=1e-4, atol=1e-4)
      np.testing.assert_allclose(scores[i, c], total / count, rtol=1e-4,
                                 atol=1e-4)
  monkeypatch.setattr(rank, "_shares_prompt", lambda _: False)
  per_label = rank.label_scores(spec, params, examples, labels, tok,
                                lengths, batch_size=4)
  assert len(calls) == 4
  np.testing.assert_allclose(per_label, scores, rtol=1e-5, atol=1e-5)


def test_text_to_text_class_tasks_are_ranked_unless_asked_to_generate(
    tok, topic):
  kw = dict(max_len=24, max_target_len=8, steps=5,
            config=_config(tok, "gpt2", dropout_rate=0.0),
            splits=("validation",))
  _, ranked = _run(tok, topic, "gpt2", None, "full", **kw)
  _, generated = _run(tok, topic, "gpt2", None, "full", scoring="generate",
                      **kw)
  assert set(ranked.predictions["validation"].tolist()) <= {0, 1}
  assert len(generated.predictions["validation"]) == len(topic.validation)
  with pytest.raises(ValueError, match="unknown scoring"):
    _run(tok, topic, "gpt2", None, "full", scoring="vote", **kw)
