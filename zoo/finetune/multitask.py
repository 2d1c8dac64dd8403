"""Many tasks at once on one shared backbone (BERT and PALs).

    scores, state = finetune_many("bert", config, params,
                                  {n: data.tasks.load(n) for n in names},
                                  tok, per_task="pals", pal_dim=48,
                                  steps=2000)

Stickland & Murray 2019. One encoder is fine-tuned on every task together;
each task keeps only a few params of its own:

- `per_task="pals"`: its head and its projected attention layers
  (`zoo.models.blocks`: V^E and V^D shared by all the layers of the
  task's PALs, one small attention per layer), so a task adds about
  `2 D d_s + L (4 d_s^2)` params beside its head;
- `per_task="heads"`: its head alone (the shared-encoder baseline).

Each step trains one task's batch. Task i is drawn with probability
proportional to N_i^alpha (N_i its training examples), alpha annealed
linearly from 1 at the first step to 0.2 at the last (the paper's
`1 - 0.8 (e - 1) / (E - 1)` over epochs, here over steps), so the large
tasks lead early and the small ones catch up; `anneal=False` keeps
alpha = 1 (sampling by size).

One AdamW recipe (linear warmup and decay by the global step, clipping,
decay on matrices): the shared params step every time, a task's own
params only on the steps that train it (their moments untouched
otherwise, as a framework skips params without a gradient).
"""

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import traverse_util

from zoo import optim
from zoo.compress import heads as pruning
from zoo.finetune import evaluate as evaluate_lib
from zoo.finetune import run as run_lib
from zoo.finetune import spec as spec_lib
from zoo.finetune import steps as step_lib

PER_TASK = ("pals", "heads")
TASK_KINDS = ("class", "pair", "regression")


@dataclasses.dataclass
class State:
  """A multi-task run's result.

  Attributes:
    specs: task name -> its `Spec`.
    shared: the backbone params every task reads (PALs left out).
    own: task name -> {"pal": its PAL params (empty under "heads"),
      "head": its head's}.
    tasks: the task drawn at each step, in order.
    losses: the training loss of each step.
  """
  specs: dict
  shared: Any
  own: dict
  tasks: list[str]
  losses: list[float]

  def params(self, name: str) -> dict:
    """{"backbone", "head"} of one task, as `finetune` would leave them."""
    return {"backbone": merge(self.shared, self.own[name]["pal"]),
            "head": self.own[name]["head"]}

  def added_params(self, name: str) -> int:
    """How many params task `name` adds to the shared backbone."""
    return pruning.count_params(self.own[name])



def is_pal(path) -> bool:
  """Whether a param path (tuple of keys) is part of a PAL."""
  return any(str(k).startswith("pal_") for k in path)


def split(backbone) -> tuple[dict, dict]:
  """A backbone's params -> (shared, PAL) trees (flat-path partition)."""
  flat = traverse_util.flatten_dict(backbone)
  pal = {k: v for k, v in flat.items() if is_pal(k)}
  rest = {k: v for k, v in flat.items() if not is_pal(k)}
  return (traverse_util.unflatten_dict(rest),
          traverse_util.unflatten_dict(pal) if pal else {})


def merge(shared, pal) -> dict:
  """Inverse of `split`: one backbone tree from shared and PAL params."""
  if not pal:
    return shared
  flat = traverse_util.flatten_dict(shared)
  flat.update(traverse_util.flatten_dict(pal))
  return traverse_util.unflatten_dict(flat)


def sampling_weights(sizes, step: int, steps: int, anneal: bool = True
                     ) -> np.ndarray:
  """p_i proportional to N_i^alpha at `step` of `steps` ([tasks] float64);
  alpha = 1 - 0.8 step / (steps - 1) when annealed, else 1."""
  alpha = 1.0 - 0.8 * step / max(steps - 1, 1) if anneal else 1.0
  weights = np.asarray(sizes, np.float64) ** alpha
  return weights / weights.sum()


def task_order(sizes, steps: int, seed: int, anneal: bool = True
               ) -> np.ndarray:
  """int [steps]: the task index trained at each step."""
  rng = np.random.default_rng(seed)
  return np.array([rng.choice(len(sizes), p=sampling_weights(
      sizes, s, steps, anneal)) for s in range(steps)])


def _adam(weight_decay: float) -> optax.GradientTransformation:
  """Adam's scaled direction plus decoupled decay on matrices (the rate
  and its sign are applied by the step)."""
  return optax.chain(optax.scale_by_adam(), optax.add_decayed_weights(
      weight_decay, mask=optim.decay_mask))


@functools.partial(jax.jit, static_argnums=0, donate_argnums=(1, 2, 3, 4))
def train_step(spec, shared, own, opt_shared, opt_own, batch, rng, lr):
  """One step on one task's batch: (shared, own, opt_shared, opt_own,
  loss)."""
  def loss_fn(shared, own):
    params = {"backbone": merge(shared, own["pal"]), "head": own["head"]}
    return step_lib.head_loss(spec, params, batch, rng)
  loss, grads = jax.value_and_grad(loss_fn, argnums=(0, 1))(shared, own)
  grads, _ = optax.clip_by_global_norm(spec.clip_norm).update(grads, None)
  tx = _adam(spec.weight_decay)
  step = lambda p, u: jax.tree_util.tree_map(lambda a, b: a - lr * b, p, u)
  u_shared, opt_shared = tx.update(grads[0], opt_shared, shared)
  u_own, opt_own = tx.update(grads[1], opt_own, own)
  return (step(shared, u_shared), step(own, u_own), opt_shared, opt_own,
          loss)


def _start(family, config, params, tasks, tokenizer, per_task, lengths,
           seed, **spec_kw):
  """Specs, shared params, each task's own params and training arrays."""
  specs, own, arrays, shared = {}, {}, {}, None
  for i, (name, task) in enumerate(tasks.items()):
    if task.kind not in TASK_KINDS:
      raise ValueError(f"multi-task fine-tuning trains {TASK_KINDS} heads; "
                       f"task {name!r} is a {task.kind} task")
    spec = spec_lib.make_spec(family, config, task, mode="full", **spec_kw)
    if spec.text_to_text:
      raise ValueError(f"multi-task fine-tuning reads an encoder through "
                       f"task heads; {family} is a {spec.interface}")
    spec_lib.check(spec, tokenizer, lengths)
    state = run_lib.init_params(spec, params, lengths["inputs"],
                                jax.random.fold_in(jax.random.key(seed), i))
    backbone, pal = split(state["backbone"])
    shared = backbone if shared is None else shared
    own[name] = {"pal": pal if per_task == "pals" else {},
                 "head": state["head"]}
    specs[name] = spec
    arrays[name] = run_lib.train_arrays(spec, task, tokenizer, lengths)
  return specs, shared, own, arrays


def _batches(arrays: dict, batch_size: int, seed: int):
  """task name -> an endless iterator of shuffled batches."""
  def stream(data, rng):
    keys = run_lib.train_keys(data)
    n, queue = len(data[keys[0]]), np.zeros(0, np.int64)
    while True:
      while len(queue) < batch_size:  # epoch after epoch, reshuffled
        queue = np.concatenate([queue, rng.permutation(n)])
      rows, queue = queue[:batch_size], queue[batch_size:]
      yield {k: data[k][rows] for k in keys}
  rng = np.random.default_rng(seed + 1)
  return {name: stream(data, rng) for name, data in arrays.items()}


def finetune_many(family: str, config, params, tasks: dict, tokenizer, *,
              per_task: str = "pals", pal_dim: int = 48, pal_heads: int = 0,
              steps: int = 1000, batch_size: int = 16, lr: float = 1e-4,
              max_len: int = 128, anneal: bool = True, seed: int = 0,
              splits: tuple[str, ...] = ("validation",),
              eval_limit: int | None = None, **spec_kw):
  """Fine-tunes one backbone on every task at once and scores each.

  Args:
    family, config, params, tokenizer: as `zoo.finetune.finetune` (params
      None: a random init). An encoder family whose blocks take PALs
      (`pal_dim` in its Config) for `per_task="pals"`.
    tasks: name -> `data.tasks.Task`, class, pair or regression tasks.
    per_task: what each task owns, one of `PER_TASK`.
    pal_dim, pal_heads: d_s and the heads of each PAL (0: the backbone's).
    steps: training steps in all (each one task's batch).
    batch_size, lr, max_len, seed: as `finetune` (lr decays linearly
      over `steps` after 10% warmup).
    anneal: alpha from 1 to 0.2 (else 1) in the task sampling.
    splits, eval_limit: what each task is scored on.
    **spec_kw: further `make_spec` arguments (pool, weight_decay, ...).

  Returns:
    ({task: {"<split>/<metric>": float, "train/loss": mean loss of its
    last steps}}, `State`).
  """
  if per_task not in PER_TASK:
    raise ValueError(f"per_task {per_task!r} is not one of {PER_TASK}")
  if per_task == "pals":
    if not hasattr(config, "pal_dim"):
      raise ValueError(f"{family} blocks take no PALs (its Config has no "
                       "pal_dim); use per_task='heads'")
    config = dataclasses.replace(config, pal_dim=pal_dim,
                                 pal_heads=pal_heads)
  lengths = {"inputs": max_len, "targets": 8}
  specs, shared, own, arrays = _start(
      family, config, params, tasks, tokenizer, per_task, lengths, seed,
      steps=steps, lr=lr, **spec_kw)
  # The step donates its inputs: never the caller's (loaded) arrays.
  shared, own = jax.tree_util.tree_map(jnp.copy, (shared, own))
  names = list(tasks)
  order = task_order([len(next(iter(arrays[n].values()))) for n in names],
                     steps, seed, anneal)
  sched = optim.schedule(ml_collections.ConfigDict(dict(
      lr=lr, warmup_steps=max(1, steps // 10), decay="linear")), steps)
  tx = _adam(specs[names[0]].weight_decay)
  (shared, own), (opt_shared, opt_own) = run_lib.placed(
      (shared, own), (tx.init(shared), {n: tx.init(own[n]) for n in names}))
  batches, rng, losses = _batches(arrays, batch_size, seed), jax.random.key(
      seed), []
  for step, index in enumerate(order):
    name = names[index]
    shared, own[name], opt_shared, opt_own[name], loss = train_step(
        specs[name], shared, own[name], opt_shared, opt_own[name],
        next(batches[name]), jax.random.fold_in(rng, step),
        jnp.float32(sched(step)))
    losses.append(loss)
  losses = [float(x) for x in jax.device_get(losses)]
  state = State(specs, shared, own, [names[i] for i in order], losses)
  return _scores(state, tasks, tokenizer, lengths, batch_size, splits,
                 eval_limit), state


def _scores(state: State, tasks, tokenizer, lengths, batch_size, splits,
            limit) -> dict:
  """Each task's metrics on `splits` and its mean loss over its last
  tenth of the steps that trained it."""
  out = {}
  for name, task in tasks.items():
    mine = [l for t, l in zip(state.tasks, state.losses) if t == name]
    metrics = {"train/loss": float(np.mean(mine[-max(1, len(mine) // 10):]))
               if mine else float("nan")}
    for split_name in splits:
      scores, _ = evaluate_lib.evaluate(
          state.specs[name], state.params(name), task, split_name, tokenizer,
          lengths, batch_size=batch_size, limit=limit)
      metrics.update({f"{split_name}/{k}": v for k, v in scores.items()})
    out[name] = metrics
  return out
