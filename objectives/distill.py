"""Knowledge distillation: a small student learns from a frozen teacher.

- `distil` (Sanh et al. 2019, DistilBERT): the student's MLM, plus a soft
  cross-entropy to the teacher's predictions at temperature T on the masked
  slots, plus the cosine between the two last hidden states at every real
  position (5 x soft CE + 2 x MLM + 1 x cosine, T = 2, as released). The
  student starts from every other layer of the teacher
  (`init_from_teacher`), which needs the teacher's family and widths.
- `tinybert` (Jiao et al. 2020), general distillation: mean squared errors
  between the embeddings, between student layer m and teacher layer
  m * L / M (through learned projections when the widths differ; one for
  the embeddings, one for the layers, as in the paper), and between their
  attention scores (pre-softmax, 0 where attention is masked); summed over
  layers. Prediction-layer soft cross-entropy (`pred_weight`) is off in the
  paper's general stage and on in its task stage
  (`zoo.finetune`'s `teacher`). The student starts from random init.

The teacher (option `teacher`) is a path the trainer reads lazily
(`zoo.loading.Teacher`: a workdir or a Hugging Face folder, as `zoo.load`),
or any object with `family`, `config` and `params`. Its params live in the
train state under "teacher", sharded by their logical axes like the
student's, and are never trained: the forward stops their gradient, the
optimizer gives them zero updates and keeps no state for them
(`Objective.frozen`). They are checkpointed with the student; `backbone`
and `zoo.load` give the student only. Student and teacher read the same
corrupted row (BERT masking, as both papers' releases do) in one jitted step.
"""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

from objectives import mlm as mlm_lib
from objectives import register
from zoo import models
from zoo.models import blocks
from zoo.models import layers

_NEEDS = ("objective {name!r} needs a teacher: a workdir or Hugging Face "
          "folder as objective_args.teacher (--config.objective_args."
          "teacher=PATH)")


def soft_target_sums(student, teacher, weights, temperature):
  """The soft-target loss (Hinton et al. 2015) as KL(p_t || p_s) T^2.

  The papers write it as the cross-entropy -sum_v p_t(v) log p_s(v); the
  KL is that minus the teacher's entropy, a constant of the student: the
  same gradient, and 0 when the student matches the teacher (the
  DistilBERT release reports it so).

  Args:
    student, teacher: [B, K, V] logits.
    weights: [B, K] bool or float, 0 where nothing is predicted.
    temperature: T, dividing both logits.

  Returns:
    `loss_sum` = sum_k w_k T^2 sum_v p_t(v) (log p_t(v) - log p_s(v)) with
    p = softmax(logits / T), and `weight_sum` = sum_k w_k; float32 scalars.
  """
  log_t = jax.nn.log_softmax(teacher.astype(jnp.float32) / temperature,
                             axis=-1)
  log_s = jax.nn.log_softmax(student.astype(jnp.float32) / temperature,
                             axis=-1)
  kl = (jnp.exp(log_t) * (log_t - log_s)).sum(-1) * temperature ** 2
  w = weights.astype(jnp.float32)
  return {"loss_sum": (kl * w).sum(), "weight_sum": w.sum()}


def cosine_sums(student, teacher, weights):
  """Sums of 1 - cos(h_s, h_t) over positions; [B, T, D] states, [B, T]
  weights."""
  s, t = student.astype(jnp.float32), teacher.astype(jnp.float32)
  dot = (s * t).sum(-1)
  norms = jnp.linalg.norm(s, axis=-1) * jnp.linalg.norm(t, axis=-1)
  cos = dot / jnp.maximum(norms, 1e-8)
  w = weights.astype(jnp.float32)
  return {"loss_sum": ((1.0 - cos) * w).sum(), "weight_sum": w.sum()}


def mse_sums(student, teacher, weights):
  """Sums of the squared error averaged over D; [B, T, D] states, [B, T]
  weights."""
  err = jnp.square(student.astype(jnp.float32) - teacher.astype(jnp.float32))
  w = weights.astype(jnp.float32)
  return {"loss_sum": (err.mean(-1) * w).sum(), "weight_sum": w.sum()}


def attention_sums(student, teacher, segment_ids):
  """Squared error of attention scores over the pairs that may attend.

  Args:
    student, teacher: [B, N, T, T] scores, 0 where masked
      (`layers.attention_scores`).
    segment_ids: [B, T] int32 documents, 0 on padding.

  Returns:
    `loss_sum` (summed over heads and pairs) and `weight_sum` (N x pairs).
  """
  same = segment_ids[:, :, None] == segment_ids[:, None, :]
  pairs = (same & (segment_ids > 0)[:, :, None]).astype(jnp.float32).sum()
  err = jnp.square(student - teacher)
  return {"loss_sum": err.sum(), "weight_sum": pairs * student.shape[1]}


def add_sums(a, b):
  """Two sum dicts added key by key."""
  return {k: a[k] + b[k] for k in a}


def forward(module, params, args, kw, rng=None, deterministic=True,
            scores=False):
  """A model's output dict; with `scores`, plus "scores": L [B, N, T, S]
  attention scores (`blocks.sown_scores`)."""
  rngs = {} if rng is None else {"dropout": rng}
  if not scores:
    return module.apply({"params": params}, *args, rngs=rngs,
                        deterministic=deterministic, **kw)
  out, state = module.apply({"params": params}, *args, rngs=rngs,
                            deterministic=deterministic,
                            mutable=["intermediates"], **kw)
  found = blocks.sown_scores(state.get("intermediates", {}))
  if not found:
    raise ValueError(f"{type(module).__module__} sows no attention scores "
                     "(its attention is not layers.MultiHeadAttention); "
                     "set attention_weight=0")
  return dict(out, scores=found)


class _Distillation(mlm_lib.MaskedLM):
  """A student encoder beside a frozen teacher encoder, on MLM rows."""
  frozen = ("teacher",)
  weight_options: dict[str, str] = {}  # part -> option holding its weight

  def setup(self):
    super().setup()
    teacher = self.options["teacher"]
    if isinstance(teacher, str):
      raise ValueError(_NEEDS.format(name=self.name) if not teacher else
                       f"objective {self.name!r} got the path {teacher!r}: "
                       "zoo.train reads paths; in Python pass "
                       "zoo.loading.Teacher(path) or zoo.load(path)")
    self.teacher = teacher
    self.part_weights = {part: float(self.options[opt])
                         for part, opt in self.weight_options.items()}

  @functools.cached_property
  def teacher_model(self) -> nn.Module:
    """The teacher's module (reads the teacher on first use)."""
    t = self.teacher
    face = models.interface_of(t.family, t.config)
    if face != "encoder":
      raise ValueError(f"a {self.name} teacher is an encoder; {t.family!r} "
                       f"is {face!r}")
    if t.config.vocab_size != self.config.vocab_size:
      raise ValueError(
          f"the teacher's vocabulary ({t.config.vocab_size}) is not the "
          f"student's ({self.config.vocab_size}): distil with the "
          "tokenizer the teacher was trained with")
    return models.get(t.family).Model(t.config)

  def init_heads(self, rng, params, inputs):
    args, kw = self.model_inputs(inputs)
    return {"teacher": self.teacher_model.init(
        {"params": rng}, *args, deterministic=True, **kw)["params"]}

  def run(self, params, inputs, rng, deterministic):
    args, kw = self.model_inputs(inputs)
    scores = self.part_weights.get("attention", 0.0) > 0
    student = forward(self.model, params["model"], args, kw, rng,
                      deterministic, scores)
    teacher = forward(self.teacher_model,
                      jax.lax.stop_gradient(params["teacher"]), args, kw,
                      scores=scores)
    return {"student": student, "teacher": teacher}

  def warm_start(self, params):
    """The fresh student beside the teacher's trained params."""
    return dict(params, teacher=self.teacher.params)


@register
class Distil(_Distillation):
  """DistilBERT: soft targets, MLM and hidden-state cosine."""
  name = "distil"
  defaults = dict(mlm_lib.MLM_DEFAULTS, teacher="", temperature=2.0,
                  ce_weight=5.0, mlm_weight=2.0, cos_weight=1.0,
                  init_from_teacher=True)
  weight_options = {"mlm": "mlm_weight", "ce": "ce_weight",
                    "cos": "cos_weight"}

  def score(self, params, inputs, outputs, rng, deterministic):
    s, t = outputs["student"], outputs["teacher"]
    if s["hidden"].shape[-1] != t["hidden"].shape[-1]:
      raise ValueError(
          f"distil's cosine loss compares hidden states of equal width; the "
          f"student has {s['hidden'].shape[-1]}, the teacher "
          f"{t['hidden'].shape[-1]} (use tinybert, which projects)")
    return {"mlm": mlm_lib.masked_sums(s["logits"], inputs),
            "ce": soft_target_sums(s["logits"], t["logits"],
                                          inputs["weights"],
                                          self.options["temperature"]),
            "cos": cosine_sums(s["hidden"], t["hidden"],
                               inputs["doc_ids"] > 0)}

  def warm_start(self, params):
    """The teacher's params, and the student cut from every other layer
    of it (`init_from_teacher`)."""
    params = super().warm_start(params)
    if self.options["init_from_teacher"]:
      params["model"] = student_from_teacher(params["model"],
                                             self.teacher.params)
    return params


def student_from_teacher(student, teacher):
  """The student's params taken from the teacher, one layer out of L / M.

  Args:
    student: the student's fresh params (M layers).
    teacher: the teacher's params (L layers, L a multiple of M), of the
      same family and widths.

  Returns:
    A tree of the student's structure holding the teacher's values: its
    layers i * L / M, and every other param under the same path.

  Raises:
    ValueError: a student param has no teacher param of its path and shape.
  """
  m = len(blocks.first_stack(student))
  depth = len(blocks.first_stack(teacher))
  if depth % m:
    raise ValueError(f"a student of {m} layers cannot take every "
                     f"{depth / m:g}-th layer of a {depth}-layer teacher")
  cut = blocks.take_layers(teacher, [i * depth // m for i in range(m)],
                           blocks.is_scanned(student))
  flat = dict(jax.tree_util.tree_flatten_with_path(cut)[0])

  def pick(path, leaf):
    value = flat.get(path)
    if value is None or value.shape != leaf.shape:
      found = "absent" if value is None else f"of shape {value.shape}"
      raise ValueError(
          f"student param {jax.tree_util.keystr(path)} {leaf.shape} is "
          f"{found} in the teacher; set init_from_teacher=False for a "
          "student of another family or width")
    return value
  return jax.tree_util.tree_map_with_path(pick, student)


@register
class TinyBert(_Distillation):
  """TinyBERT general distillation: embeddings, layers and attention."""
  name = "tinybert"
  defaults = dict(mlm_lib.MLM_DEFAULTS, teacher="", temperature=1.0,
                  embedding_weight=1.0, hidden_weight=1.0,
                  attention_weight=1.0, pred_weight=0.0, mlm_weight=0.0)
  weight_options = {"mlm": "mlm_weight", "embedding": "embedding_weight",
                    "hidden": "hidden_weight",
                    "attention": "attention_weight", "pred": "pred_weight"}

  def _widths(self):
    return self.config.embed_dim, self.teacher.config.embed_dim

  def _projection(self):
    """TinyBERT's learned map from the student's width to the teacher's."""
    return layers.Dense(self.teacher.config.embed_dim, ("embed", "embed_out"))

  def init_heads(self, rng, params, inputs):
    heads = super().init_heads(rng, params, inputs)
    if self.config.embed_dim != self.teacher.config.embed_dim:
      x = jnp.zeros((1, 1, self.config.embed_dim), jnp.float32)
      keys = jax.random.split(rng, 2)
      heads["projections"] = {
          name: self._projection().init(key, x)["params"]
          for name, key in zip(("embedding", "hidden"), keys)}
    return heads

  def _project(self, params, name, x):
    """x [B, T, D_s] -> [B, T, D_t] (the identity when the widths agree)."""
    if "projections" not in params:
      return x
    return self._projection().apply(
        {"params": params["projections"][name]}, x)

  def score(self, params, inputs, outputs, rng, deterministic):
    s, t = outputs["student"], outputs["teacher"]
    real = inputs["doc_ids"] > 0
    parts = {"mlm": mlm_lib.masked_sums(s["logits"], inputs),
             "embedding": mse_sums(
                 self._project(params, "embedding", s["layers"][0]),
                 t["layers"][0], real)}
    pick = _layer_map(len(s["layers"]) - 1, len(t["layers"]) - 1)
    parts["hidden"] = _over_layers(
        lambda m, n: mse_sums(self._project(params, "hidden",
                                            s["layers"][m]),
                              t["layers"][n], real), pick)
    if "scores" in s:
      parts["attention"] = _over_layers(
          lambda m, n: attention_sums(_heads_match(s["scores"][m - 1],
                                                   t["scores"][n - 1]),
                                      t["scores"][n - 1], inputs["doc_ids"]),
          pick)
    parts["pred"] = soft_target_sums(
        s["logits"], t["logits"], inputs["weights"],
        self.options["temperature"])
    return parts


def _layer_map(student: int, teacher: int) -> list[tuple[int, int]]:
  """TinyBERT's uniform map: student layer m (1..M) learns teacher layer
  m * L / M."""
  if teacher % student:
    raise ValueError(f"a {student}-layer student maps onto a {teacher}-"
                     "layer teacher only when L is a multiple of M")
  return [(m, m * teacher // student) for m in range(1, student + 1)]


def _over_layers(fn, pick):
  """Sums of `fn(m, n)` added over layers; the weight of one layer (the
  losses add up over layers, as in the paper)."""
  total = None
  for m, n in pick:
    sums = fn(m, n)
    total = sums if total is None else dict(
        add_sums(total, sums), weight_sum=sums["weight_sum"])
  return total


def _heads_match(student, teacher):
  if student.shape[1] != teacher.shape[1]:
    raise ValueError(f"attention distillation compares heads one to one: "
                     f"the student has {student.shape[1]}, the teacher "
                     f"{teacher.shape[1]} (set attention_weight=0)")
  return student
