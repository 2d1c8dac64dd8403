"""Fine-tuning: every mode learns, frozen stays frozen, heads score the
right positions, text-to-text backbones generate and get scored, a run
compiles its step once. Label strings learnt by teacher forcing and rank
classification: `test_finetune_text.py`."""

import random

import jax
import numpy as np
import pytest
from flax import traverse_util

from data.tasks import Task
from zoo import checkpoint as ckpt_lib
from zoo import finetune
from zoo.finetune import ulmfit
from zoo.finetune import arrays as finetune_arrays
from zoo.finetune import evaluate as finetune_eval
from zoo.finetune import run as finetune_run
from zoo.finetune import spec as spec_lib
from zoo.finetune import steps as finetune_steps
from zoo import models
from zoo.models import heads

pytestmark = pytest.mark.slow  # minutes of training runs: not the quick lane

ANIMALS = "cat dog horse cow sheep goat mouse bird".split()
VEHICLES = "car bus train truck plane boat bike ship".split()
FILLER = "the a and of in on with very".split()
STEPS = 40


def _topic_examples(n, seed):
  """Bags of animal or vehicle words with filler: separable by keywords."""
  r = random.Random(seed)
  out = []
  for _ in range(n):
    label = r.randrange(2)
    words = r.sample([ANIMALS, VEHICLES][label], 4) + r.sample(FILLER, 3)
    r.shuffle(words)
    text = " ".join(words)
    out.append(dict(inputs=f"topic: {text}", text=text, label=label,
                    targets=["animal", "vehicle"][label]))
  return out


def _tag_examples(n, seed):
  """Sentences whose tag per word is its word list (animal/vehicle/filler)."""
  r = random.Random(seed)
  out = []
  for _ in range(n):
    tags = [r.randrange(3) for _ in range(6)]
    words = [r.choice([ANIMALS, VEHICLES, FILLER][t]) for t in tags]
    out.append(dict(inputs="tags: " + " ".join(words), words=words,
                    tags=tags, targets=" ".join("AVF"[t] for t in tags)))
  return out


def _span_examples(n, seed):
  """Which animal is in the sentence? The answer is its one animal word."""
  r = random.Random(seed)
  out = []
  for _ in range(n):
    words = r.sample(VEHICLES, 3) + r.sample(FILLER, 3)
    where = r.randrange(len(words) + 1)
    animal = r.choice(ANIMALS)
    words.insert(where, animal)
    context = " ".join(words)
    out.append(dict(inputs="", targets=animal, question="which animal?",
                    context=context, answer=animal,
                    answer_start=len(" ".join(words[:where] + [""]))
                    if where else 0))
  return out


def _task(name, kind, metric, labels, make):
  return Task(name, kind, metric, labels, {
      "train": make(256, 0), "validation": make(64, 1), "test": make(32, 2)})


@pytest.fixture(scope="module")
def topic():
  return _task("topic", "class", "accuracy", ["animal", "vehicle"],
               _topic_examples)


def _config(tok, family="bert", **kw):
  return models.make_config(family, "tiny", vocab_size=tok.vocab_size, **kw)


def _run(tok, task, family, params, mode, **kw):
  kw = dict(dict(steps=STEPS, batch_size=16, lr=1e-3, max_len=16), **kw)
  config = kw.pop("config", None) or _config(tok, family)
  return finetune.finetune(family, config, params, task, tok, mode=mode,
                           return_state=True, **kw)


@pytest.fixture(scope="module")
def full(tok, topic):
  """A BERT fine-tuned from scratch on the topic task (all params train)."""
  # From scratch the [cls] state needs ~30 steps before it carries the
  # topic; 100 leave a wide margin.
  return _run(tok, topic, "bert", None, "full", steps=100)


def _flat(tree):
  return {"/".join(k): np.asarray(v)
          for k, v in traverse_util.flatten_dict(tree).items()}


def test_full_mode_learns_from_random_init(full):
  metrics, state = full
  assert metrics["validation/accuracy"] > 80
  assert metrics["test/accuracy"] > 80
  assert np.mean(state.losses[-5:]) < np.mean(state.losses[:5])


def test_frozen_mode_trains_only_the_head(tok, topic, full):
  backbone = full[1].params["backbone"]
  before = _flat(backbone)
  metrics, state = _run(tok, topic, "bert", backbone, "frozen")
  after = _flat(state.params["backbone"])
  assert before.keys() == after.keys()
  for k in before:
    assert before[k].tobytes() == after[k].tobytes(), k
  assert metrics["validation/accuracy"] > 80


def test_standardized_head_reads_the_train_moments_and_never_trains_them(
    tok, topic, full):
  backbone = full[1].params["backbone"]
  _, state = _run(tok, topic, "bert", backbone, "frozen", steps=5,
                  pool="mean", standardize=True)
  arrays = finetune_arrays.split_arrays(state.spec, topic.train, tok,
                                        {"inputs": 16, "targets": 32})
  model = models.get("bert").Model(state.spec.config)
  hidden = model.apply({"params": backbone}, arrays["tokens"],
                       deterministic=True, return_logits=False)["hidden"]
  pooled = heads.pool(hidden, arrays["tokens"] != 0, "mean")
  mean, std = heads.moments(pooled)
  assert std.min() < 0.5 * std.max()  # the scales differ per feature
  got = state.params["head"]["classify"]["standardize"]
  # After 5 Adam steps at 1e-3 a trained entry would be ~5e-3 away.
  np.testing.assert_allclose(got["mean"], mean, atol=1e-5)
  np.testing.assert_allclose(got["scale"], 1 / std, rtol=1e-5)


def test_ulmfit_recipe_keeps_frozen_groups_and_learns(tok, topic, full):
  backbone = full[1].params["backbone"]
  before = _flat(backbone)
  # Nothing below the head unfreezes within the run: every backbone param
  # stays bitwise (no gradient, no weight decay), and the head learns.
  recipe = ulmfit.Recipe(unfreeze_every=2 * STEPS)
  metrics, state = _run(tok, topic, "bert", backbone, "full", ulmfit=recipe)
  after = _flat(state.params["backbone"])
  for k in before:
    assert before[k].tobytes() == after[k].tobytes(), k
  assert metrics["validation/accuracy"] > 80
  # Unfrozen one group every 5 steps, discriminative rates: the top layer
  # moves more than the token table.
  recipe = ulmfit.Recipe(unfreeze_every=5)
  _, state = _run(tok, topic, "bert", backbone, "full", ulmfit=recipe)
  after = _flat(state.params["backbone"])
  moved = {k: np.abs(after[k] - before[k]).max() for k in before}
  top = max(v for k, v in moved.items() if "layer_1/" in k)
  assert 0 < moved["embeddings/token/embedding"] < top


def test_adapters_mode_changes_only_adapters_and_head(tok, topic, full):
  backbone = full[1].params["backbone"]
  before = _flat(backbone)
  metrics, state = _run(tok, topic, "bert", backbone, "adapters")
  after = _flat(state.params["backbone"])
  adapters = [k for k in after if "adapter" in k]
  assert adapters and set(after) - set(before) == set(adapters)
  for k in before:
    assert before[k].tobytes() == after[k].tobytes(), k
  assert any(np.abs(after[k]).max() > 0 for k in adapters if "up" in k)
  assert metrics["validation/accuracy"] > 80


def test_scalar_mix_mode_learns_layer_weights(tok, topic, full):
  backbone = full[1].params["backbone"]
  metrics, state = _run(tok, topic, "bert", backbone, "scalar_mix")
  mix = state.params["head"]["mix"]
  assert np.abs(np.asarray(mix["weights"])).max() > 0
  assert len(mix["weights"]) == _config(tok).num_layers + 1
  for k, v in _flat(backbone).items():
    assert v.tobytes() == _flat(state.params["backbone"])[k].tobytes()
  assert metrics["validation/accuracy"] > 80


def test_tag_positions_are_each_words_first_piece(tok):
  task = _task("tags", "tags", "accuracy", list("AVF"), _tag_examples)
  examples = task.validation[:8]
  arrays = finetune_arrays.encoder_arrays("tags", examples, tok, 16)
  for i, ex in enumerate(examples):
    pieces, first = finetune_arrays.word_pieces(tok, ex["words"])
    for w, pos in enumerate(arrays["word_pos"][i, :len(ex["words"])]):
      if pos >= 0:
        assert arrays["tokens"][i, pos] == pieces[first[w]]
        assert arrays["tags"][i, pos] == ex["tags"][w]
  gold = {"tags": arrays["tags"]}
  perfect = finetune_eval.head_scores(task, examples, arrays, gold, tok)
  shifted = {"tags": np.roll(arrays["tags"], 1, axis=1)}
  worse = finetune_eval.head_scores(task, examples, arrays, shifted, tok)
  kept = (arrays["word_pos"] >= 0).sum() / sum(len(e["tags"])
                                               for e in examples)
  assert perfect["accuracy"] == pytest.approx(100 * kept)
  assert worse["accuracy"] < perfect["accuracy"]


@pytest.mark.parametrize("tagger", ["linear", "bilstm"])
def test_tag_head_trains(tok, tagger):
  task = _task("tags", "tags", "accuracy", list("AVF"), _tag_examples)
  metrics, state = _run(tok, task, "bert", None, "full", max_len=24,
                        tagger=tagger)
  assert metrics["validation/accuracy"] > 60  # three tags: chance ~33
  head = state.params["head"]["tag"]
  assert ("bilstm" in head) == (tagger == "bilstm")


def test_unknown_tagger_is_refused(tok, topic):
  with pytest.raises(ValueError, match="unknown tagger 'crf'"):
    _run(tok, topic, "bert", None, "full", tagger="crf")


def test_span_head_scores_decoded_answers(tok):
  task = _task("span", "span", "squad", [], _span_examples)
  examples = task.validation[:8]
  arrays = finetune_arrays.encoder_arrays("span", examples, tok, 24)
  assert (arrays["start"] >= 0).all()
  assert (arrays["answer_mask"][np.arange(8), arrays["start"]]).all()
  gold = {"start": arrays["start"], "end": arrays["end"]}
  scores = finetune_eval.head_scores(task, examples, arrays, gold, tok)
  assert scores["exact_match"] == 100.0
  metrics, state = _run(tok, task, "bert", None, "full", max_len=24)
  assert np.mean(state.losses[-5:]) < np.mean(state.losses[:5]) - 0.5
  assert metrics["validation/f1"] > 30


def test_ulmfit_head_classifies_from_an_awd_lstm_decoder(tok, topic):
  config = _config(tok, "awd_lstm", embed_dropout=0.0, input_dropout=0.0,
                   hidden_dropout=0.0, dropout_rate=0.0, weight_drop=0.0)
  metrics, state = _run(tok, topic, "awd_lstm", None, "full", head="ulmfit",
                        config=config, ulmfit=dict(layer_decay=2.6))
  assert state.spec.interface == "encoder" and not state.spec.text_to_text
  assert set(state.params["head"]) == {"ulmfit"}
  assert metrics["validation/accuracy"] > 80
  with pytest.raises(ValueError, match="the ulmfit head classifies"):
    _run(tok, topic, "t5", None, "full", head="ulmfit", steps=1)


def test_decoder_generates_labels_after_a_separator(tok, topic):
  metrics, state = _run(tok, topic, "gpt2", None, "full", max_len=24,
                        max_target_len=8,
                        config=_config(tok, "gpt2", dropout_rate=0.0))
  assert metrics["validation/accuracy"] > 80
  assert "head" not in state.params


def test_encdec_generates_text_scored_by_rouge(tok):
  def copy(n, seed):
    r = random.Random(seed)
    out = []
    for _ in range(n):
      words = " ".join(r.sample(ANIMALS + VEHICLES, 3))
      out.append(dict(inputs=f"copy: {words}", targets=words))
    return out
  task = _task("copy", "seq2seq", "rouge", [], copy)
  metrics, state = _run(tok, task, "t5", None, "full", steps=60, lr=1e-2,
                        max_target_len=6, splits=("validation",),
                        config=_config(tok, "t5", dropout_rate=0.0))
  assert np.mean(state.losses[:5]) - np.mean(state.losses[-5:]) > 3
  lengths = {"inputs": 16, "targets": 6}  # 3 words: 5 pieces and eos
  arrays = finetune_arrays.split_arrays(state.spec, task.validation, tok, lengths)
  texts = finetune_eval.generate_texts(state.spec, state.params, arrays, tok,
                                  lengths["targets"], 16)
  assert len(texts) == len(task.validation)
  assert all(isinstance(t, str) for t in texts)
  again = finetune_eval.text_scores(task, task.validation, texts)
  assert {f"validation/{k}": v for k, v in again.items()} == {
      k: v for k, v in metrics.items() if k.startswith("validation/")}
  assert all(0 <= v <= 100 for v in again.values())
  assert set(again) == {"rouge1", "rouge2", "rougeL"}


def test_bad_requests_name_the_problem(tok, topic):
  with pytest.raises(ValueError, match="unknown fine-tuning mode"):
    finetune.finetune("bert", _config(tok), None, topic, tok, mode="lora")
  with pytest.raises(ValueError, match="text-to-text"):
    finetune.finetune("t5", _config(tok, "t5"), None, topic, tok,
                      mode="frozen")
  small = models.make_config("bert", "tiny")
  with pytest.raises(ValueError, match="tokenizer has"):
    finetune.finetune("bert", small, None, topic, tok)
  seq = Task("s", "seq2seq", "rouge", [], topic.splits)
  with pytest.raises(ValueError, match="needs an encoder-decoder"):
    finetune.finetune("bert", _config(tok), None, seq, tok)
  with pytest.raises(ValueError, match="position"):
    finetune.finetune("bert", _config(tok), None, topic, tok, max_len=4096)
  wrong = {"backbone": jax.numpy.zeros(3)}
  with pytest.raises(ValueError, match="lack"):
    finetune.finetune("bert", _config(tok), wrong, topic, tok, steps=1)
  with pytest.raises(ValueError, match="unknown pooling 'max'"):
    finetune.finetune("bert", _config(tok), None, topic, tok, pool="max")
  with pytest.raises(ValueError, match="standardize applies to the pooled"):
    finetune.finetune("bert", _config(tok), None, topic, tok,
                      head="ulmfit", standardize=True)


def test_pooling_defaults_per_family_and_can_be_chosen(tok, topic):
  auto = finetune.make_spec("bert", _config(tok), topic)
  assert auto.pool == "cls"
  assert finetune.make_spec("gpt2", _config(tok, "gpt2"), topic).pool == "mean"
  mean = finetune.make_spec("bert", _config(tok), topic, pool="mean")
  assert mean.pool == "mean"
  params = finetune.init_params(auto, None, 16, jax.random.key(0))
  batch = {"tokens": np.asarray([[4, 9, 10, 11, 0, 0]] * 2, np.int32),
           "token_types": np.zeros((2, 6), np.int32)}
  batch["tokens"][1, 1] = 12  # rows differ after the first position only
  by_cls = finetune_steps.head_forward(auto, params, batch, deterministic=True)
  by_mean = finetune_steps.head_forward(mean, params, batch,
                                      deterministic=True)
  assert not np.allclose(by_mean[0], by_mean[1], atol=1e-6)
  assert not np.allclose(np.asarray(by_cls), np.asarray(by_mean))


def test_xlnet_pools_its_last_piece_and_reads_pair_types(tok, topic):
  spec = finetune.make_spec("xlnet", _config(tok, "xlnet"), topic)
  assert spec.pool == "last"
  params = finetune.init_params(spec, None, 16, jax.random.key(0))
  batch = {"tokens": np.asarray([[4, 9, 10, 11, 0, 0]] * 2, np.int32),
           "token_types": np.zeros((2, 6), np.int32)}
  batch["token_types"][1, 2:4] = 1  # row 1 is a pair: its types differ
  hidden = finetune_steps.backbone_outputs(spec, params["backbone"], batch,
                                           deterministic=True)["hidden"]
  model = models.get("xlnet").Model(spec.config)
  run = lambda **kw: model.apply({"params": params["backbone"]},
                                 batch["tokens"], return_logits=False,
                                 **kw)["hidden"]
  np.testing.assert_array_equal(hidden, run(token_types=batch["token_types"]))
  assert np.abs(np.asarray(hidden - run())).max() > 0  # the types count
  assert not models.reads_token_types("gpt2", _config(tok, "gpt2"))


@pytest.mark.parametrize("restored", [False, True])
def test_a_run_compiles_its_train_step_once(tok, topic, restored,
                                            monkeypatch):
  """The fresh head and optimizer state start placed as the steps return
  them (jit keys a program by where its inputs live), so the first run of
  steps runs the program of every later one: from a random init, and from
  a backbone placed as a restored checkpoint is. (4 steps, 2 to a
  program: the same program twice.)"""
  monkeypatch.setattr(finetune_run, "CHUNK_STEPS", 2)
  config = _config(tok, "bert", num_layers=3 if restored else 1)
  params = None
  if restored:
    params = jax.device_put(
        models.init_params("bert", config, jax.random.key(1), heads=False),
        ckpt_lib.replicated())
  before = finetune_steps.train_steps._cache_size()
  _run(tok, topic, "bert", params, "full", steps=4, splits=(), config=config)
  assert finetune_steps.train_steps._cache_size() == before + 1


def test_tasks_of_one_head_width_share_their_compiled_programs(tok, topic):
  """A 2-class and a 3-class task (both heads 8 wide) run the same
  compiled backbone init, train and predict programs; the head is drawn
  per C, and its held-out classes never move nor win a prediction."""
  three = _task("three", "class", "accuracy", ["animal", "vehicle", "none"],
                _topic_examples)
  config = _config(tok, "bert", num_layers=2)  # compiled by no other test
  programs = (finetune_run._fresh, finetune_steps.train_steps,  # pylint: disable=protected-access
              finetune_steps.predict_step)
  _run(tok, topic, "bert", None, "full", steps=3, config=config,
       splits=("validation",))
  before = [f._cache_size() for f in programs]  # pylint: disable=protected-access
  _, state = _run(tok, three, "bert", None, "full", steps=3, config=config,
                  splits=("validation",))
  assert [f._cache_size() for f in programs] == before  # pylint: disable=protected-access
  out = state.params["head"]["classify"]["out"]
  assert (state.spec.num_labels, state.spec.head_width) == (3, 8)
  assert out["kernel"].shape[-1] == 8
  np.testing.assert_array_equal(out["kernel"][:, 3:], 0.0)
  np.testing.assert_array_equal(out["bias"][3:], spec_lib.ABSENT_LOGIT)
  assert np.abs(np.asarray(out["kernel"][:, :3])).min() > 0
  assert 0 <= state.predictions["validation"].min()
  assert state.predictions["validation"].max() < 3
