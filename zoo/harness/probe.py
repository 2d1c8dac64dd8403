"""The linear-probe view: an L2 logistic regression on frozen features.

    view = run(zoo.load(path), task, "validation", {"max_len": 64})
    probe = fit(features, labels, num_classes)      # [N, F] or [N, L, F]
    predict(probe, held_out)                         # int32 [N]
    probe.layer_weights                              # [L] softmax, or None

`run` reads every layer of a frozen backbone, mean-pooled over each text's
real pieces (`features`; encoder states of encoder-decoders, hidden states
of decoders), fits on the task's whole train split and predicts the whole
evaluation split, once from the scalar mix of all layers and once from the
last layer alone.

One fixed recipe (`Recipe`) for every row of the harness: features are
standardised with the train mean and std, the probe starts at zero, and a
deterministic full-batch L-BFGS (optax.lbfgs with a zoom line search) runs
inside one jitted `lax.while_loop` until the gradient norm falls below
`tol` or `steps` iterations have run.

Fits share compiled solvers across tasks: the class axis is padded to a
multiple of `LABEL_WIDTH` (the classes past C are held out of the softmax
by a fixed `ABSENT_LOGIT` offset, so their weights and biases have exactly
zero gradient and stay at their zero start), and `run` pads the train
split's rows to a multiple of `ROW_STEP` with rows of zero weight in the
loss. At the harness's sizes a solve takes a small fraction of the
seconds its compile takes, so padded rows cost little, and the demo's
three tasks fit with one solver per feature shape.

With per-layer features [N, L, F] the probe first mixes the layers as ELMo
does, sum_l softmax(a)_l * x_l, with the mix logits `a` [L] fitted jointly
with the classifier. ELMo's scale gamma is not a separate parameter here:
in front of a linear layer, gamma times W is the same model as W alone, and
the L2 penalty on the product would leave gamma unidentified.

Letters: N examples, L layers, F features, C classes.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from zoo import distributed
from zoo.finetune.spec import ABSENT_LOGIT, padded_width
from zoo.models import heads

# Features wider than this fit with zero columns up to a multiple of it, so
# fits whose widths differ a little (the bag-of-words vocabularies of
# several K-shot sets) share one compiled solver.
WIDTH_STEP = 128
# `run` pads a task's train rows to a multiple of this: every split of up to
# this many rows (the demo's 1,482 to 4,381) fits with one solver.
ROW_STEP = 8192


@dataclasses.dataclass(frozen=True)
class Recipe:
  """The probe's one fixed recipe.

  Attributes:
    l2: penalty l2 / 2 * ||W||^2 on the weights (not the bias) of the
      standardised features, added to the *mean* cross-entropy, so its
      strength does not depend on N. Standardised features have unit scale,
      so one value serves every row; 1e-2 sits in the flat middle of the
      range that scores best for the bag of words on trec, sms_spam,
      bbc_topic and rotten_tomatoes (validation; 1e-3 to 1e-1 within ~2
      points), and conditions L-BFGS well enough to stop early.
    steps: the most L-BFGS iterations; well-conditioned (standardised,
      penalised) problems stop earlier on `tol`.
    tol: stop once the gradient's global norm is below this.
    memory: L-BFGS history length (pairs of updates kept).
    mix_l2: penalty mix_l2 / 2 * ||a||^2 on the layer-mix logits, pulling
      the mix towards uniform so that it stays bounded when one layer
      dominates; weak enough that a layer that alone carries the signal
      gets almost all the weight.
  """
  l2: float = 1e-2
  steps: int = 200
  tol: float = 1e-5
  memory: int = 10
  mix_l2: float = 1e-3


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Probe:
  """A fitted probe (a pytree of numpy arrays).

  Attributes:
    mean: float32 [F] or [L, F], the train features' mean.
    std: float32 [F] or [L, F], their std (1 where a feature is constant).
    weights: float32 [F, C] on standardised (and mixed) features.
    bias: float32 [C].
    mix_logits: float32 [L] for per-layer features, else None.
  """
  mean: np.ndarray
  std: np.ndarray
  weights: np.ndarray
  bias: np.ndarray
  mix_logits: np.ndarray | None = None

  @property
  def layer_weights(self) -> np.ndarray | None:
    """float32 [L], the softmax of the mix logits, or None without a mix."""
    if self.mix_logits is None:
      return None
    a = self.mix_logits - self.mix_logits.max()
    return (np.exp(a) / np.exp(a).sum()).astype(np.float32)


def _logits(params: dict, z, absent):
  """Logits [N, C] of standardised features z [N, F] or [N, L, F]; absent
  [C] is 0 for a task's classes and `ABSENT_LOGIT` past them."""
  if "mix" in params:
    z = jnp.einsum("nlf,l->nf", z, jax.nn.softmax(params["mix"]))
  return z @ params["w"] + params["b"] + absent


def _loss(params: dict, z, y, r, absent, l2, mix_l2):
  """Cross-entropy averaged over the rows of weight r [N] (1 for a real
  example, 0 for padding) plus the recipe's penalties (a scalar)."""
  ce = optax.softmax_cross_entropy_with_integer_labels(
      _logits(params, z, absent), y)
  penalty = 0.5 * l2 * jnp.sum(jnp.square(params["w"]))
  if "mix" in params:
    penalty += 0.5 * mix_l2 * jnp.sum(jnp.square(params["mix"]))
  return jnp.sum(ce * r) / jnp.sum(r) + penalty


@functools.partial(jax.jit, static_argnames=("steps", "memory"))
def _solve(params: dict, z, y, r, absent, l2, mix_l2, tol, steps: int,
           memory: int):
  """L-BFGS on `_loss` from `params`; returns the fitted params."""
  fun = functools.partial(_loss, z=z, y=y, r=r, absent=absent, l2=l2,
                          mix_l2=mix_l2)
  opt = optax.lbfgs(memory_size=memory)
  value_and_grad = optax.value_and_grad_from_state(fun)

  def body(carry):
    p, state, k, _ = carry
    value, grad = value_and_grad(p, state=state)
    updates, state = opt.update(grad, state, p, value=value, grad=grad,
                                value_fn=fun)
    return (optax.apply_updates(p, updates), state, k + 1,
            optax.tree_utils.tree_norm(grad))

  def cond(carry):
    return (carry[2] < steps) & (carry[3] > tol)

  carry = (params, opt.init(params), jnp.int32(0), jnp.float32(jnp.inf))
  return jax.lax.while_loop(cond, body, carry)[0]


def _check(features, probe_mean=None) -> np.ndarray:
  """Features as float32 [N, F] or [N, L, F], matching a probe if given."""
  x = np.asarray(features, np.float32)
  if x.ndim not in (2, 3) or x.shape[0] == 0:
    raise ValueError(f"features must be [N, F] or [N, L, F], got {x.shape}")
  if probe_mean is not None and x.shape[1:] != probe_mean.shape:
    raise ValueError(f"features {x.shape} for a probe fitted on "
                     f"{probe_mean.shape}")
  return x


def fit(features, labels, num_classes: int, recipe: Recipe = Recipe(),
        row_step: int = 1) -> Probe:
  """Fits the probe on train features.

  Args:
    features: float32 [N, F] (a plain multinomial logistic regression) or
      [N, L, F] (per-layer features, mixed by learned softmax weights).
    labels: int [N] in [0, C).
    num_classes: C.
    recipe: the fitting recipe.
    row_step: the rows go to the solver padded to a multiple of this
      (padding has zero weight in the loss), so that fits of different N
      share one compiled solver (`run` passes `ROW_STEP`).

  Returns:
    The fitted `Probe`; the same inputs give the same probe, bit for bit.
  """
  x = _check(features)
  y = np.asarray(labels, np.int32)
  if y.shape != x.shape[:1] or y.min() < 0 or y.max() >= num_classes:
    raise ValueError(f"labels {y.shape} in [{y.min()}, {y.max()}] for "
                     f"features {x.shape} and {num_classes} classes")
  mean, std = heads.moments(x)
  z, y, r, absent = _solver_inputs((x - mean) / std, y, num_classes,
                                   row_step)
  params = dict(w=jnp.zeros((z.shape[-1], absent.size), jnp.float32),
                b=jnp.zeros((absent.size,), jnp.float32))
  if x.ndim == 3:
    params["mix"] = jnp.zeros((x.shape[1],), jnp.float32)
  params = _solve(params, z, y, r, absent, jnp.float32(recipe.l2),
                  jnp.float32(recipe.mix_l2), jnp.float32(recipe.tol),
                  steps=recipe.steps, memory=recipe.memory)
  params = jax.tree_util.tree_map(np.asarray, params)
  # Zero columns and absent classes have zero gradient: their weights stay
  # at their zero start.
  return Probe(mean, std, params["w"][:x.shape[-1], :num_classes],
               params["b"][:num_classes], params.get("mix"))


def _solver_inputs(z, y, num_classes: int, row_step: int):
  """What `_solve` reads, padded so that near shapes share one program.

  Returns:
    z [N', F'] or [N', L, F']: standardised features with zero columns up
    to a multiple of `WIDTH_STEP` (when wider than one) and zero rows up to
    a multiple of `row_step`; y [N'] int32 labels (0 on padding); r [N']
    float32 row weights (1 real, 0 padding); absent [C'] float32, 0 for the
    C classes and `ABSENT_LOGIT` past them, C' a multiple of `LABEL_WIDTH`.
  """
  z = _padded(_padded(z, -1, WIDTH_STEP + 1, WIDTH_STEP), 0, 0, row_step)
  rows = lambda a: jnp.asarray(_padded(a, 0, 0, row_step))
  width = padded_width(num_classes)
  absent = np.where(np.arange(width) < num_classes, 0.0, ABSENT_LOGIT)
  return (jnp.asarray(z), rows(y), rows(np.ones(len(y), np.float32)),
          jnp.asarray(absent, jnp.float32))


def _padded(a: np.ndarray, axis: int, least: int, step: int) -> np.ndarray:
  """a with zeros along `axis` up to a multiple of `step`, when that axis
  is at least `least` long."""
  size = a.shape[axis]
  if size < least:
    return a
  pad = [(0, 0)] * a.ndim
  pad[axis] = (0, -size % step)
  return np.pad(a, pad)


def probabilities(probe: Probe, features) -> np.ndarray:
  """Class probabilities, float32 [N, C], of features [N, F] or [N, L, F]."""
  z = (_check(features, probe.mean) - probe.mean) / probe.std
  if probe.mix_logits is not None:
    z = np.einsum("nlf,l->nf", z, probe.layer_weights)
  logits = z @ probe.weights + probe.bias
  logits -= logits.max(-1, keepdims=True)
  p = np.exp(logits)
  return (p / p.sum(-1, keepdims=True)).astype(np.float32)


def predict(probe: Probe, features) -> np.ndarray:
  """Predicted classes, int32 [N], of features [N, F] or [N, L, F]."""
  return probabilities(probe, features).argmax(-1).astype(np.int32)


def features(loaded, texts: list[str], max_len: int,
             batch_size: int = 128) -> np.ndarray:
  """float32 [N, L+1, D]: every layer's states mean-pooled over the real
  pieces of each text (encoder states of encoder-decoders), from a
  `zoo.loading.Loaded`; rows pad to `max_len` so one program serves all.
  Chunks of `batch_size` texts are dealt out across processes."""
  def pool(start: int) -> np.ndarray:
    chunk = list(texts[start:start + batch_size])
    real = len(chunk)
    chunk += [chunk[0]] * (batch_size - real)
    pooled = loaded.embed(chunk, max_len=max_len)["layers_mean"]
    return np.asarray(np.transpose(pooled, (1, 0, 2))[:real], np.float32)
  parts = distributed.split_work(pool, range(0, len(texts), batch_size))
  return np.concatenate(parts).astype(np.float32)


def run(loaded, task, split: str, recipe: dict) -> dict:
  """The probe view of one task: fit on the whole train split, predict the
  whole `split`, from the scalar mix of all layers and from the last one.

  Args:
    loaded: a `zoo.loading.Loaded` (the frozen backbone).
    task: a class task.
    split: the evaluation split.
    recipe: the grid's `probe` block: "max_len" and optional `Recipe`
      fields.

  Returns:
    {"metric", "labels" [N], "preds" [1][N] (scalar mix), "preds_last"
    [1][N] (last layer), "layer_weights" [L+1]}.
  """
  fit_recipe = Recipe(**{k: v for k, v in recipe.items() if k != "max_len"})
  max_len = int(recipe["max_len"])
  train = features(loaded, [ex["text"] for ex in task.train], max_len)
  test = features(loaded, [ex["text"] for ex in task.splits[split]], max_len)
  labels = np.asarray([ex["label"] for ex in task.train], np.int32)
  mix = fit(train, labels, len(task.labels), fit_recipe, ROW_STEP)
  last = fit(train[:, -1], labels, len(task.labels), fit_recipe, ROW_STEP)
  return {"metric": task.metric,
          "labels": [ex["label"] for ex in task.splits[split]],
          "preds": [predict(mix, test).tolist()],
          "preds_last": [predict(last, test[:, -1]).tolist()],
          "layer_weights": np.asarray(mix.layer_weights).tolist()}
