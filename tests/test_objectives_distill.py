"""Distillation schemes: `distil` (DistilBERT) and `tinybert` (TinyBERT).

The losses against hand computations, the student cut from its teacher,
attention scores read in layer order, and real trainer steps: the student's
loss falls on a fixed batch while the teacher's params stay bitwise as
loaded, sharded like the student's, with no optimizer state.
"""

import dataclasses
import math

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

import objective_checks as oc
from objectives import common
from objectives import distill
from zoo import models, optim, sharding
from zoo import train_lib as lib
from zoo.models import blocks

NO_DROPOUT = {"dropout_rate": 0.0, "attention_dropout_rate": 0.0}


@dataclasses.dataclass
class Teacher:
  """What a scheme reads of a teacher (as `zoo.loading.Teacher` gives)."""
  family: str
  config: object
  params: object


def make_teacher(num_layers=2, seed=3, **args):
  """A random BERT-tiny teacher of `num_layers` layers."""
  config, model = models.make("bert", "tiny", vocab_size=oc.VOCAB,
                              num_layers=num_layers, nsp_head=False,
                              **NO_DROPOUT, **args)
  tokens = oc.tiny_batch()["tokens"]
  params = model.init({"params": jax.random.key(seed)}, tokens)["params"]
  return Teacher("bert", config, common.nn.meta.unbox(params))


@pytest.fixture(scope="module")
def teacher():
  return make_teacher()


def test_soft_target_loss_equals_hand_computation():
  rng = np.random.default_rng(0)
  s, t = rng.normal(size=(2, 3, 5)), rng.normal(size=(2, 3, 5))
  w = np.array([[1, 1, 0], [1, 0, 1]], bool)
  temp = 2.0
  got = distill.soft_target_sums(jnp.asarray(s), jnp.asarray(t),
                                        jnp.asarray(w), temp)
  want = 0.0
  for b in range(2):
    for k in range(3):
      if w[b, k]:
        p_t = np.exp(t[b, k] / temp) / np.exp(t[b, k] / temp).sum()
        p_s = np.exp(s[b, k] / temp) / np.exp(s[b, k] / temp).sum()
        want += temp ** 2 * (p_t * np.log(p_t / p_s)).sum()
  np.testing.assert_allclose(float(got["loss_sum"]), want, rtol=1e-5)
  assert float(got["weight_sum"]) == 4


def test_cosine_and_mse_sums_equal_hand_computation():
  s = jnp.array([[[1.0, 0.0], [1.0, 1.0]]])
  t = jnp.array([[[0.0, 2.0], [2.0, 2.0]]])
  w = jnp.array([[True, True]])
  cos = distill.cosine_sums(s, t, w)
  assert float(cos["loss_sum"]) == pytest.approx(1.0)  # 1 - 0 + 1 - 1
  mse = distill.mse_sums(s, t, w)
  # position 0: (1 + 4) / 2, position 1: (1 + 1) / 2
  assert float(mse["loss_sum"]) == pytest.approx(3.5)
  assert float(mse["weight_sum"]) == 2


def test_attention_scores_are_sown_per_layer_scanned_or_not(teacher):
  batch = oc.tiny_batch()
  tokens, seg = batch["tokens"], batch["doc_ids"]
  model = models.get("bert").Model(teacher.config)
  scan = models.get("bert").Model(
      dataclasses.replace(teacher.config, scan_layers=True))
  layers_ = [teacher.params["encoder"][f"layer_{i}"] for i in range(2)]
  stacked = dict(teacher.params, encoder={
      "layers": blocks.stack_layer_params(layers_)})
  kw = {"segment_ids": seg}
  got = distill.forward(model, teacher.params, (tokens,), kw, scores=True)
  scanned = distill.forward(scan, stacked, (tokens,), kw, scores=True)
  assert len(got["scores"]) == len(scanned["scores"]) == 2
  for a, b in zip(got["scores"], scanned["scores"]):
    np.testing.assert_allclose(a, b, atol=1e-5)
  # Layer 1's scores by hand: its queries and keys of layer 0's output.
  att = layers_[1]["attention"]
  x = got["layers"][1]
  q = jnp.einsum("btd,dnh->btnh", x, att["query"]["kernel"]) + att["query"][
      "bias"]
  k = jnp.einsum("btd,dnh->btnh", x, att["key"]["kernel"]) + att["key"]["bias"]
  logits = jnp.einsum("btnh,bsnh->bnts", q, k) / math.sqrt(q.shape[-1])
  allowed = (seg[:, :, None] == seg[:, None, :]) & (seg > 0)[:, :, None]
  want = jnp.where(allowed[:, None], logits, 0.0)
  np.testing.assert_allclose(got["scores"][1], want, atol=1e-4)


@pytest.mark.parametrize("scan", [False, True])
def test_distil_student_starts_from_every_other_teacher_layer(scan):
  big = make_teacher(num_layers=4)
  obj = oc.build("distil", "bert", teacher=big,
                 model_args={"num_layers": 2, "scan_layers": scan})
  fresh = common.nn.meta.unbox(obj.init(jax.random.key(0), oc.tiny_batch()))
  started = obj.warm_start(fresh)
  assert started["teacher"] is big.params
  student = started["model"]
  layer_1 = (jax.tree.map(lambda x: x[1], student["encoder"]["layers"]
                          ["block"]) if scan else
             student["encoder"]["layer_1"])
  jax.tree.map(np.testing.assert_array_equal, layer_1,
               big.params["encoder"]["layer_2"])
  jax.tree.map(np.testing.assert_array_equal, student["embeddings"],
               big.params["embeddings"])


def test_a_student_of_another_width_cannot_start_from_the_teacher(teacher):
  obj = oc.build("distil", "bert", teacher=teacher,
                 model_args={"embed_dim": 32, "mlp_dim": 64})
  fresh = common.nn.meta.unbox(
      jax.eval_shape(obj.init, jax.random.key(0), oc.tiny_batch()))
  with pytest.raises(ValueError, match="init_from_teacher=False"):
    obj.warm_start(fresh)


def test_schemes_name_what_is_missing(teacher):
  with pytest.raises(ValueError, match="objective_args.teacher"):
    oc.build("distil", "bert")
  with pytest.raises(ValueError, match="zoo.loading.Teacher"):
    oc.build("tinybert", "bert", teacher="/some/path")
  other = dataclasses.replace(
      teacher, config=dataclasses.replace(teacher.config, vocab_size=600))
  obj = oc.build("distil", "bert", teacher=other)
  with pytest.raises(ValueError, match="vocabulary"):
    obj.init(jax.random.key(0), oc.tiny_batch())
  obj = oc.build("tinybert", "bert", teacher=teacher,
                 model_args={"num_heads": 2})
  params = jax.eval_shape(obj.init, jax.random.key(0), oc.tiny_batch())
  with pytest.raises(ValueError, match="heads one to one"):
    jax.eval_shape(obj.loss, params, oc.tiny_batch(), jax.random.key(1))


def _trainer(obj, mesh):
  """Sharded state, warm-started, and the trainer's jitted step."""
  config = ml_collections.ConfigDict(dict(
      model="bert", objective=obj.name, steps=30, batch_size=8, seq_len=48,
      optimizer=dict(lr=1e-2, warmup_steps=0, decay="constant",
                     weight_decay=0.01)))
  config = lib.config_lib.complete(config)
  tx = optim.make(config.optimizer, 30)
  setup = lib.setup_state(obj, tx, config, mesh)
  state = lib.warm_start(obj, setup.init(lib.init_rng(0)), setup)
  step = lib.make_train_step(obj, tx, config, setup,
                             optim.schedule(config.optimizer, 30))
  return setup, state, step


@pytest.mark.parametrize("name,args", [
    ("distil", {}),
    ("tinybert", {"embed_dim": 32, "mlp_dim": 64}),
])
def test_student_learns_and_teacher_stays_bitwise(name, args, teacher):
  obj = oc.build(name, "bert", teacher=teacher, model_args=args)
  mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  setup, state, step = _trainer(obj, mesh)
  start = jax.device_get(state["params"])
  batch = lib.global_batch(
      {k: np.asarray(v) for k, v in oc.tiny_batch(batch_size=8).items()},
      setup.batch_sharding, 8)
  # The teacher is sharded by its logical axes, as the student is.
  token = state["params"]["teacher"]["embeddings"]["token"]["embedding"]
  assert token.sharding.spec == state["params"]["model"]["embeddings"][
      "token"]["embedding"].sharding.spec
  losses = []
  with sharding.activate(mesh, setup.rules):
    for _ in range(12):
      state, metrics = step(state, batch)
      losses.append(float(metrics["step_loss"]))
  jax.tree.map(np.testing.assert_array_equal,
               jax.device_get(state["params"]["teacher"]), teacher.params)
  # No optimizer state mirrors the teacher: Adam's moments are the
  # student's (and the projections') only.
  moments = sum(x.size for x in jax.tree.leaves(state["opt_state"]))
  trained = sum(x.size for k, v in state["params"].items() if k != "teacher"
                for x in jax.tree.leaves(v))
  assert moments <= 2 * trained + 16, (moments, trained)
  assert np.isfinite(losses).all(), losses
  moved = jax.device_get(state["params"]["model"]["encoder"])
  assert not np.array_equal(
      jax.tree.leaves(moved)[0],
      jax.tree.leaves(jax.device_get(start["model"]["encoder"]))[0])


@pytest.mark.parametrize("name,args", [
    ("distil", {}),
    ("tinybert", {"embed_dim": 32, "mlp_dim": 64}),
])
def test_student_loss_falls_on_a_fixed_batch(name, args, teacher):
  obj = oc.build(name, "bert", teacher=teacher, model_args=args)
  batch = oc.tiny_batch()
  out = oc.train(obj, batch, steps=30, lr=1e-2)
  assert out["finite"]
  assert out["last"] < 0.5 * out["first"], out


def _run_config(objective, **objective_args):
  from configs import common as config_common  # pylint: disable=import-outside-toplevel
  c = config_common.tiny(config_common.base_config())
  c.model, c.objective = "bert", objective
  c.data.source, c.data.vocab_size = "synthetic", oc.VOCAB
  c.steps, c.seq_len, c.eval_steps, c.checkpoint_every = 1, 32, 0, 1
  c.objective_args = objective_args
  if objective != "mlm":
    c.model_args = {"num_layers": 1}
  return c


@pytest.mark.slow
def test_a_distilled_workdir_loads_without_its_teacher(tmp_path):
  from zoo import loading, train  # pylint: disable=import-outside-toplevel
  teacher_dir, student_dir = tmp_path / "teacher", tmp_path / "student"
  train.train(_run_config("mlm"), str(teacher_dir))
  out = train.train(_run_config("distil", teacher=str(teacher_dir)),
                    str(student_dir))
  assert out["step"] == 1 and math.isfinite(out["loss"])
  teacher_dir.rename(tmp_path / "moved")  # zoo.load needs the student only
  student = loading.load(str(student_dir))
  assert student.family == "bert" and student.config.num_layers == 1
  assert "teacher" not in student.params
