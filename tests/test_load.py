"""`zoo.load`: round trip across device counts, corrupt checkpoints, faces."""

import gc
import os
import shutil
import subprocess
import sys
import warnings

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

import objectives
import zoo
from configs.compare import smoke
from zoo import checkpoint as ckpt_lib
from zoo import loading, models, optim, sharding, train, train_lib

pytestmark = pytest.mark.slow  # minutes of training runs: not the quick lane

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Four rows: the batch splits over the 2x2 (data, fsdp) shards of the mesh.
TEXTS = ["the bank of the river was muddy", "she paid money into the bank",
         "a bank raised its rates", "we walked along the river bank"]


def _config() -> ml_collections.ConfigDict:
  """A tiny BERT MLM run on a 2x2x2 mesh, checkpoints at steps 2 and 4."""
  c = smoke.get_config().pretrain
  c.model, c.objective = "bert", "mlm"
  c.steps, c.checkpoint_every, c.log_every = 4, 2, 2
  c.mesh = ml_collections.ConfigDict({"data": 2, "fsdp": 2, "tensor": 2})
  return c


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
  path = str(tmp_path_factory.mktemp("load") / "run")
  train.train(_config(), path)
  return path


def _training_hidden(workdir: str, step: int) -> np.ndarray:
  """Hidden states from params restored as the trainer lays them out."""
  config = _config()
  loaded = zoo.load(workdir, step=step)
  objective = train_lib.build_objective(
      config, objectives.Specials(**loaded.tokenizer.specials()))
  mesh = sharding.make_mesh(config.mesh)
  setup = train_lib.setup_state(objective, optim.make(config.optimizer, 4),
                                config, mesh)
  ckpt = ckpt_lib.Checkpointer(workdir, async_save=False)
  state, _ = ckpt.restore(step, ckpt_lib.with_shardings(setup.abstract,
                                                        setup.shardings))
  ckpt.close()
  family, model_cfg, params = objective.backbone(state["params"])
  leaf = jax.tree.leaves(params)[0]
  assert len(leaf.sharding.device_set) == 8  # sharded as in training
  tokens = jnp.asarray(loaded.batch(TEXTS))
  with sharding.activate(mesh, setup.rules):
    out = models.get(family).Model(model_cfg).apply(
        {"params": params}, tokens, return_logits=False)
  return np.asarray(out["hidden"])


@pytest.mark.slow
def test_round_trip_on_one_device_after_training_on_eight(workdir, tmp_path):
  want = _training_hidden(workdir, 4)
  np.save(tmp_path / "want.npy", want)
  script = (
      "import sys, numpy as np, jax, zoo\n"
      "assert jax.device_count() == 1\n"
      f"m = zoo.load({workdir!r})\n"
      "leaf = jax.tree.leaves(m.params)[0]\n"
      "assert len(leaf.sharding.device_set) == 1\n"
      f"got = m.embed({TEXTS!r})['hidden']\n"
      f"np.testing.assert_allclose(got, np.load({str(tmp_path / 'want.npy')!r}),"
      " rtol=1e-5, atol=1e-5)\n"
      "print('step', m.step, m.family)\n")
  env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="1",
             PYTHONPATH=REPO)
  proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "step 4 bert" in proc.stdout


def test_loaded_faces(workdir):
  m = zoo.load(workdir)
  assert (m.step, m.family, m.interface) == (4, "bert", "encoder")
  assert m.run_config["objective"] == "mlm"
  out = m.embed(TEXTS)
  b, t = out["tokens"].shape
  assert out["hidden"].shape == (b, t, m.config.embed_dim)
  assert out["layers"].shape[0] == m.config.num_layers + 1
  assert out["mask"].sum() == sum(len(m.ids(x)) for x in TEXTS)
  # Contextual: one word, two contexts, two vectors; the table has one.
  a = m.word_vector("bank", TEXTS[0])
  c = m.word_vector("bank", TEXTS[1])
  assert not np.allclose(a, c, atol=1e-4)
  assert m.static_vector("bank").shape == (m.config.embed_dim,)
  filled = m.fill_mask("the <mask> of the river", top_k=3)
  assert len(filled) == 1 and len(filled[0]) == 3
  probs = [p for _, p in filled[0]]
  assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1
  with pytest.raises(ValueError, match="no mask"):
    m.fill_mask("no marker here")
  with pytest.raises(ValueError, match="decoder or an encoder-decoder"):
    m.generate("hello")
  with pytest.raises(ValueError, match="do not occur"):
    m.word_vector("zebra", TEXTS[0])
  assert m.heads == {}
  with pytest.raises(ValueError, match="no dEA head"):
    m.entity_logits(["a dog is a kind of <mask>."], np.arange(3))


def _corrupt(step_dir: str) -> None:
  """Truncates the largest array file of a checkpoint."""
  files = [os.path.join(d, f) for d, _, fs in os.walk(step_dir) for f in fs]
  biggest = max(files, key=os.path.getsize)
  with open(biggest, "r+b") as f:
    f.truncate(os.path.getsize(biggest) // 4)


def test_corrupt_latest_checkpoint_falls_back(workdir, tmp_path, caplog):
  copy = str(tmp_path / "run")
  shutil.copytree(workdir, copy)
  _corrupt(os.path.join(copy, "checkpoints", "4"))
  unraisable, hook = [], sys.unraisablehook
  sys.unraisablehook = unraisable.append
  try:
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      m = zoo.load(copy)
    gc.collect()
  finally:
    sys.unraisablehook = hook
  # The failed read's pending shard reads are freed quietly, not printed
  # one traceback each whenever the collector reaches them (here after
  # `load` returned), nor logged by asyncio as never retrieved.
  assert not unraisable, [str(u.exc_value) for u in unraisable[:3]]
  assert not [r for r in caplog.records if "never retrieved" in r.message]
  assert m.step == 2
  assert any("checkpoint 4" in str(w.message) and "unreadable"
             in str(w.message) for w in caught)
  previous = zoo.load(workdir, step=2)
  for a, b in zip(jax.tree.leaves(m.params), jax.tree.leaves(previous.params)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  _corrupt(os.path.join(copy, "checkpoints", "2"))
  with pytest.raises(ValueError, match="no checkpoint .* could be restored"):
    zoo.load(copy)


def test_workdir_without_checkpoint_is_a_clear_error(workdir, tmp_path):
  empty = tmp_path / "empty"
  (empty / "checkpoints").mkdir(parents=True)
  shutil.copy(os.path.join(workdir, "config.json"), empty / "config.json")
  with pytest.raises(FileNotFoundError, match="no complete checkpoint"):
    zoo.load(str(empty))
  with pytest.raises(FileNotFoundError, match="neither a workdir"):
    zoo.load(str(tmp_path))
  with pytest.raises(FileNotFoundError, match="no complete checkpoint"):
    zoo.load(workdir, step=3)


@pytest.mark.slow
def test_generate_is_the_greedy_continuation(workdir):
  """A decoder's `generate` matches argmax decoding written out by hand."""
  tok = zoo.load(workdir).tokenizer
  config, model = models.make("gpt2", "tiny", vocab_size=tok.vocab_size)
  params = nn.meta.unbox(model.init(jax.random.key(3),
                                    jnp.ones((1, 8), jnp.int32))["params"])
  m = loading.Loaded("gpt2", config, params, tok, None, "memory")
  text = "the river bank"
  ids = m.ids(text)[:-1]  # the prompt without its eos
  for _ in range(6):
    logits = model.apply({"params": params}, jnp.asarray([ids]))["logits"]
    ids.append(int(jnp.argmax(logits[0, -1])))
  want = ids[len(m.ids(text)) - 1:]
  eos = tok.specials()["eos"]
  want = want[:want.index(eos)] if eos in want else want
  assert m.generate(text, max_len=6) == tok.decode(want)



def test_hugging_face_folder_embeds_like_the_reference(tmp_path):
  """A tiny random HF BERT with a vocab.txt: `embed` matches torch."""
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  words = ["the", "bank", "river", "money", "paid", "she", "of", "##s"]
  vocab = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words
           + [f"filler{i}" for i in range(64 - 5 - len(words))])
  hf = transformers.BertModel(transformers.BertConfig(
      vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2,
      num_attention_heads=2, intermediate_size=64, max_position_embeddings=64))
  hf.save_pretrained(str(tmp_path), safe_serialization=True)
  (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
  m = zoo.load(str(tmp_path))
  assert (m.family, m.step, m.tokenizer.kind) == ("bert", None, "wordpiece")
  texts = ["she paid money", "the banks of the river"]
  out = m.embed(texts)
  assert out["tokens"][1].tolist() == [2, 5, 6, 12, 11, 5, 7, 3]
  with torch.no_grad():
    want = hf.eval()(torch.tensor(out["tokens"], dtype=torch.long),
                     attention_mask=torch.tensor(out["mask"].astype(int)))
  got, ref = out["hidden"], want.last_hidden_state.numpy()
  np.testing.assert_allclose(got[out["mask"]], ref[out["mask"]], atol=1e-4)


def test_real_minilm_embeds_mixed_case_text_like_the_reference(
    minilm_folder):
  """The folder's own tokenizer (capitals, accents) and the model: mean-
  pooled sentence vectors equal the reference pipeline's."""
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  folder = str(minilm_folder)
  texts = ["A man is playing a guitar on the stage.",
           "The central bank raised interest rates again.",
           "Ein ganz anderer Satz mit Umlauten: äöü."]
  ours = zoo.load(folder).embed(texts)["mean"]
  tok = transformers.AutoTokenizer.from_pretrained(folder)
  enc = tok(texts, padding=True, return_tensors="pt")
  with torch.no_grad():
    hidden = transformers.BertModel.from_pretrained(folder).eval()(
        **enc).last_hidden_state.numpy()
  mask = enc["attention_mask"].numpy()[..., None].astype(np.float32)
  theirs = (hidden * mask).sum(1) / mask.sum(1)
  cos = (ours * theirs).sum(-1) / (np.linalg.norm(ours, axis=-1)
                                   * np.linalg.norm(theirs, axis=-1))
  assert cos.min() >= 0.99999, cos


def test_a_workdir_saved_unrolled_loads_where_the_default_scans(
    workdir, monkeypatch):
  # Stacks this deep scan by default now; the checkpoint holds layer_<i>.
  before = zoo.load(workdir).embed(["the cat"])
  monkeypatch.setattr(models, "SCAN_FROM_LAYERS", 1)
  assert models.make_config("bert", "tiny").scan_layers
  loaded = zoo.load(workdir)
  assert loaded.config.scan_layers is False
  np.testing.assert_allclose(loaded.embed(["the cat"])["mean"],
                             before["mean"], atol=1e-6)


def test_ernie_entity_logits_read_the_dea_head_as_training_does(tok):
  from zoo import knowledge  # pylint: disable=import-outside-toplevel
  specials = objectives.Specials(**tok.specials())
  # Two K-layers: the mask's state reads the subject's entity (one fuses
  # it at the subject's piece only).
  obj = objectives.build("ernie", "ernie", "tiny", specials,
                         model_args={"num_k_layers": 2},
                         entity_vectors="random")
  texts = ["a dog is a kind of <mask>.", "an apple is a kind of <mask> ."]
  run = {"data": {"entities": "wordnet"}}
  tokens = loading.Loaded("ernie", obj.config, None, tok, None, "-",
                          run).batch(texts)
  ids = knowledge.entity_ids(tok, tokens)
  assert (ids > 0).sum(1).min() >= 1  # "dog" and "apple" are linked
  inputs = {"inputs": jnp.asarray(tokens), "entity_in": jnp.asarray(ids),
            "doc_ids": jnp.asarray(tokens != specials.pad, jnp.int32),
            "logits_at": jnp.zeros((2, 1), jnp.int32)}
  model = obj.init_model(jax.random.key(0), inputs)
  params = nn.meta.unbox(dict(model=model, **obj.init_heads(
      jax.random.key(2), {"model": model}, inputs)))
  params["entities"] = params["entities"] * 30  # entities that matter
  m = loading.Loaded("ernie", obj.config, params["model"], tok, None, "-",
                     run, heads=obj.heads(params))
  candidates = np.asarray([3, 11, 4000])
  got = m.entity_logits(texts, candidates)
  hidden = obj.run(params, inputs, jax.random.key(1), True)["hidden"]
  rows, cols = np.nonzero(tokens == specials.mask)
  queries = obj.dea.apply({"params": params["dea"]}, hidden[rows, cols])
  want = queries @ params["entities"][candidates + 1].T
  blind = obj.run(params, dict(inputs, entity_in=jnp.zeros_like(ids)),
                  jax.random.key(1), True)["hidden"]
  unread = obj.dea.apply({"params": params["dea"]}, blind[rows, cols]) @ \
      params["entities"][candidates + 1].T
  # Equal to training's reading, far closer than to a reading without the
  # question's entities.
  assert np.abs(got - want).max() < np.abs(got - unread).max() / 20
