"""Pieces of the one trainer: data, sharded state, the jitted steps.

The train state is a dict of jax Arrays:
  step: int32 scalar, updates applied so far.
  params: the objective's params (float32), sharded by their logical axes.
  opt_state: the optax state, sharded like the params it mirrors.
  bad_step: int32 scalar, the first step whose loss or gradient was not
    finite (-1: none yet). Such a step leaves params and optimizer as they
    were, so the host can stop (or go on) without losing a good state.
  memory: only for an objective that carries something across steps
    (`Objective.init_carry` not None, e.g. `clm` with `memory=True`): what
    it carries, sharded by its logical axes and checkpointed like the rest.
    Every other objective's state and checkpoints have no such key.
"""

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

import objectives
from data import batch as batch_lib
from data import config as data_config
from data.synthetic import SyntheticLoader
from zoo import accumulate
from zoo import config as config_lib
from zoo import distributed
from zoo import models
from zoo import optim
from zoo import precision
from zoo import sharding


def build_loader(config, split: str, batch_size: int, seed: int,
                 rows=None):
  """This process's batch iterator for `split` ("train" or "validation").

  Args:
    config: the run config (reads `data`, `seq_len`).
    split: which stream.
    batch_size: rows per process.
    seed: the stream's seed.
    rows: the global batch rows this process feeds, in order (default:
      the process's contiguous block; `sharding.process_rows` gives them
      for a mesh).

  Returns:
    An iterator of int32 `[batch_size, T]` dicts with `get_state()` and
    `set_state()`; real sources also have `.tokenizer`.
  """
  config = config_lib.complete(config)
  kwargs = dict(seq_len=int(config.seq_len), batch_size=batch_size, seed=seed,
                process_index=jax.process_index(),
                process_count=jax.process_count(), rows=rows)
  data_config.check_mode(data_config.as_config(config.data))
  if config.data.source == "synthetic":
    if split != "train":
      kwargs["seed"] = seed + 1_000_003  # held-out rows, never trained on
    return SyntheticLoader(vocab_size=int(config.data.vocab_size),
                           **kwargs)
  # Imported here: the real sources pull in grain and sentencepiece, seconds
  # of start-up that synthetic runs do without.
  import data  # pylint: disable=import-outside-toplevel
  if jax.process_count() > 1 and not config.data.tokenizer:
    # The embedded sample and its tokenizer (or the speech sample) are
    # built once, by process 0, while the others wait: never one build per
    # host on a shared disk.
    distributed.main_first(lambda: _build_sample(config.data),
                           f"data_ready_{split}")
  return data.pretrain_loader(config.data, split=split, **kwargs)


def check_config(config, mesh, processes: int | None = None) -> None:
  """Raises ValueError on batch sizes the mesh cannot split.

  `processes` is the host count of a mesh planned for other hosts
  (`zoo.plan`); by default this run's processes, whose own share of the
  batch is checked too.
  """
  rows, micro = int(config.batch_size), int(config.microbatches)
  procs = jax.process_count() if processes is None else processes
  shards = sharding.batch_divisor(mesh, config.rules)
  if micro < 1 or rows % micro:
    raise ValueError(f"batch_size {rows} is not divisible by microbatches "
                     f"{micro}")
  if rows % procs:
    raise ValueError(f"batch_size {rows} is not divisible by the "
                     f"{procs} processes")
  if (rows // micro) % shards:
    raise ValueError(
        f"microbatch of {rows // micro} rows (batch_size {rows} / "
        f"microbatches {micro}) is not divisible by the {shards} batch "
        f"shards of mesh {dict(mesh.shape)}")
  shared = sharding.shared_batch_shards(mesh, config.rules)
  if shared:
    shard, owners = shared[0]
    raise ValueError(
        f"mesh {dict(mesh.shape)}: batch shard {shard} is held by devices "
        f"of processes {owners}, which would each feed it different rows; "
        "put the axes that cross processes on the batch (data, fsdp) and "
        "keep tensor within a process")
  if processes is not None:
    return
  held = len(sharding.process_rows(mesh, config.rules, rows))
  if held * procs != rows:
    raise ValueError(
        f"mesh {dict(mesh.shape)}: this process's devices hold {held} of "
        f"the {rows} rows of each batch, not an equal share of {procs} "
        "processes")


def specials_of(config, loader) -> objectives.Specials:
  """The special token ids: the loader's tokenizer's, else defaults."""
  tokenizer = getattr(loader, "tokenizer", None)
  if tokenizer is not None:
    return objectives.Specials(**tokenizer.specials())
  config = config_lib.complete(config)
  return objectives.Specials(vocab_size=int(config.data.vocab_size))


def build_objective(config, specials: objectives.Specials, tokenizer=None,
                    platform: str | None = None):
  """The objective the config names, bound to its model and size.

  The compute dtype follows `zoo.precision`'s policy for `platform` (the
  backend the step compiles for; default jax's) unless
  `model_args.dtype` sets it. A character-CNN ELMo also gets the character
  table of `tokenizer`'s pieces (required then). A `teacher` option (a
  distillation scheme's, a path) becomes a lazy `zoo.loading.Teacher`.
  """
  config = config_lib.complete(config)
  options = dict(config.objective_args)
  if isinstance(options.get("teacher"), str) and options["teacher"]:
    # A distillation teacher named by its path: read when the scheme first
    # needs it (zoo.loading imports this module, hence here).
    from zoo import loading  # pylint: disable=import-outside-toplevel
    options["teacher"] = loading.Teacher(options["teacher"])
  model_args = precision.resolve(dict(config.model_args), platform)
  if model_args:
    options["model_args"] = model_args
  if model_args.get("char_cnn"):
    if tokenizer is None:
      raise ValueError("a char-CNN ELMo reads the characters of its "
                       "tokenizer's pieces; this run has no tokenizer "
                       "(the synthetic source has none)")
    from zoo.models import elmo  # pylint: disable=import-outside-toplevel
    max_chars = models.make_config(config.model, config.size,
                                   **model_args).max_chars
    options["char_table"] = elmo.char_table(tokenizer.pieces(), max_chars)
  options.update(_corpus_options(config, options, tokenizer))
  return objectives.build(config.objective, model=config.model,
                          size=config.size, specials=specials, **options)


def _corpus_options(config, options: dict, tokenizer) -> dict:
  """What a word2vec scheme reads of its corpus and vocabulary, as
  callables the scheme calls when it first needs them: the pieces' counts
  over the training split (`data.counts`), and a FastText model's n-gram
  ids of every piece (`zoo.models.static.ngram_table`). Without a
  tokenizer, the data config's is read then."""
  out = {}

  def tok():
    import data  # pylint: disable=import-outside-toplevel
    return tokenizer or data.load_tokenizer(config.data)

  if objectives.takes(config.objective, "counts") and (
      options.get("counts") is None):
    from data import counts  # pylint: disable=import-outside-toplevel
    out["counts"] = lambda: counts.piece_counts(config.data, tok())
  mod = (models.get(config.model) if config.model in models.FAMILIES
         else None)
  if hasattr(mod, "ngram_table") and options.get("ngram_table") is None:
    model_cfg = models.make_config(config.model, config.size,
                                   **dict(options.get("model_args", {})))
    if model_cfg.ngram_buckets > 0:
      out["ngram_table"] = lambda: mod.ngram_table(tok().pieces(), model_cfg)
  return out
  if tokenizer is None:
    raise ValueError(f"objective {config.objective!r} on {config.model!r} "
                     "reads the corpus's pieces; this run has no tokenizer "
                     "(the synthetic source has none)")
  if wants_counts:
    from data import counts  # pylint: disable=import-outside-toplevel
    out["counts"] = counts.piece_counts(config.data, tokenizer)
  if fasttext and options.get("ngram_table") is None:
    cfg = models.make_config(config.model, config.size,
                             **dict(options.get("model_args", {})))
    out["ngram_table"] = mod.ngram_table(tokenizer.pieces(), cfg)
  return out


def _build_sample(data_cfg) -> None:
  """Builds what the data config reads of the embedded samples."""
  import data  # pylint: disable=import-outside-toplevel
  if data_cfg.source == "speech":
    from data import speech  # pylint: disable=import-outside-toplevel
    speech.build(data_cfg.path or None)
  else:
    data.load_tokenizer(data_cfg)


def example_batch(seq_len: int, rows: int = 1, data_cfg=None
                  ) -> dict[str, np.ndarray]:
  """A `[rows, T]` int32 batch of the contract's keys, for shape tracing
  (a speech batch where `data_cfg.source` is "speech")."""
  if data_cfg is not None and data_cfg.source == "speech":
    from data import audio  # pylint: disable=import-outside-toplevel
    return batch_lib.speech_example(seq_len, rows, audio.Features().n_mels)
  batch = {k: np.zeros((rows, seq_len), np.int32) for k in batch_lib.KEYS}
  batch["tokens"][:] = 7
  for key in ("doc_ids", "sentence_ids", "word_ids", "doc_keys"):
    batch[key][:] = 1
  return batch


@dataclasses.dataclass
class Setup:
  """What the loop needs: mesh, rules, shardings and the jitted functions."""
  mesh: jax.sharding.Mesh
  rules: tuple
  abstract: Any          # state of ShapeDtypeStructs (unboxed)
  shardings: Any         # NamedSharding per state leaf
  init: Callable         # rng -> sharded state
  batch_sharding: jax.sharding.NamedSharding


def setup_state(objective, tx, config, mesh) -> Setup:
  """Derives the state's shardings abstractly and jits a sharded init.

  Params and optimizer state are never materialized unsharded: the init is
  traced once with `jax.eval_shape`, its logical boxes give shardings, and
  the real init runs under `jax.jit(out_shardings=...)`.
  """
  rules = sharding.check_rules(config.rules)
  example = example_batch(int(config.seq_len), data_cfg=config.data)
  tx = optim.freeze(tx, objective.frozen)

  def init_boxed(rng):
    params = objective.init(rng, example)
    state = {"step": jnp.zeros((), jnp.int32), "params": params,
             "opt_state": tx.init(params),
             "bad_step": jnp.full((), -1, jnp.int32)}
    carry = objective.init_carry(int(config.batch_size), int(config.seq_len))
    if carry is not None:
      state["memory"] = carry
    return state

  boxed = jax.eval_shape(init_boxed, jax.random.key(0))
  shardings = sharding.logical_shardings(boxed, mesh, rules)
  init = jax.jit(lambda rng: sharding.unbox(init_boxed(rng)),
                 out_shardings=shardings,
                 compiler_options=models.INIT_COMPILER_OPTIONS)
  return Setup(mesh=mesh, rules=rules, abstract=sharding.unbox(boxed),
               shardings=shardings, init=init,
               batch_sharding=sharding.batch_sharding(mesh, rules))


def warm_start(objective, state, setup: Setup):
  """A fresh state with the params the objective starts from
  (`Objective.warm_start`), placed with the state's shardings."""
  params = objective.warm_start(state["params"])
  if params is state["params"]:
    return state
  shardings = setup.shardings["params"]
  def place(value, sharding_, like):
    value = np.asarray(value, like.dtype)
    if value.shape != like.shape:
      raise ValueError(f"warm start gives {value.shape} for a param of "
                       f"shape {like.shape}")
    return jax.make_array_from_callback(value.shape, sharding_,
                                        lambda index: value[index])
  placed = jax.tree_util.tree_map(place, params, shardings, state["params"])
  return dict(state, params=placed)


def global_batch(local: dict[str, np.ndarray], batch_sharding,
                 global_rows: int) -> dict[str, jax.Array]:
  """Global `[B, T, ...]` arrays from every process's `[B/processes, T, ...]`
  share (float32 frames stay float32, ids become int32)."""
  out = {}
  for key, value in local.items():
    shape = (global_rows,) + tuple(value.shape[1:])
    value = np.asarray(value)
    dtype = np.float32 if np.issubdtype(value.dtype, np.floating) else np.int32
    out[key] = jax.make_array_from_process_local_data(
        batch_sharding, value.astype(dtype, copy=False), shape)
  return out


def _grads(objective, params, batch, rng):
  """Gradient of the mean loss, with the loss weight for accumulation."""
  def f(p):
    loss, metrics = objective.loss(p, batch, rng, deterministic=False)
    return loss, metrics
  (loss, metrics), grads = jax.value_and_grad(f, has_aux=True)(params)
  weight = jax.lax.stop_gradient(
      jnp.asarray(metrics.get("weight_sum", 1.0), jnp.float32))
  return grads, loss, metrics, weight


def _split_micro(batch, micro: int, mesh, rules):
  """`[B, T]` -> `[M, B/M, T]` keeping each device's rows on that device."""
  spec = sharding.mesh_axes_for((None, "batch", None), rules)
  def one(x):
    x = x.reshape((x.shape[0] // micro, micro) + x.shape[1:])
    x = jnp.swapaxes(x, 0, 1)
    return jax.lax.with_sharding_constraint(
        x, jax.sharding.NamedSharding(mesh, spec))
  return jax.tree_util.tree_map(one, batch)


def accumulated_grads(objective, params, batch, rng, micro: int, mesh, rules):
  """Grads, loss and metric sums of a batch, over `micro` microbatches.

  One microbatch is the plain gradient; more go through `zoo.accumulate`,
  which equals one big batch up to float rounding (dropout off). A custom
  objective without the scheme hooks (`corrupt`, `run`, `score`) weights
  each microbatch's gradient by its `weight_sum` instead.
  """
  if micro == 1:
    grads, loss, metrics, _ = _grads(objective, params, batch, rng)
    return grads, loss, metrics
  if all(hasattr(objective, h) for h in ("corrupt", "run", "score")):
    return accumulate.grads(objective, params, batch, rng, micro, mesh, rules)
  parts = _split_micro(batch, micro, mesh, rules)

  def body(carry, xs):
    index, part = xs
    grads, loss, metrics, weight = _grads(
        objective, params, part, jax.random.fold_in(rng, index))
    scaled = jax.tree_util.tree_map(lambda g: g * weight, grads)
    add = lambda a, b: jax.tree_util.tree_map(jnp.add, a, b)
    return add(carry, (scaled, loss * weight, metrics, weight)), None

  one = jax.tree_util.tree_map(lambda x: x[0], parts)
  shapes = jax.eval_shape(lambda: _grads(objective, params, one, rng))
  zeros = jax.tree_util.tree_map(lambda a: jnp.zeros(a.shape, a.dtype),
                                 shapes)
  (grads, loss, metrics, weight), _ = jax.lax.scan(
      body, zeros, (jnp.arange(micro), parts))
  grads = jax.tree_util.tree_map(lambda g: g / weight, grads)
  return grads, loss / weight, metrics


def carried_grads(objective, params, batch, rng, carry):
  """Grads, loss, metric sums and the next carry of an objective that
  carries something across steps (`Objective.loss_carry`; one microbatch).
  """
  def f(p):
    loss, metrics, new = objective.loss_carry(p, batch, rng, carry,
                                              deterministic=False)
    return loss, (metrics, new)
  (loss, (metrics, new)), grads = jax.value_and_grad(f, has_aux=True)(params)
  return grads, loss, metrics, new


def step_grads(objective, state, batch, rng, micro: int, mesh, rules):
  """`(grads, loss, metrics, carry)` of one step: the carry is the next
  `state["memory"]`, or None for an objective that carries nothing."""
  if "memory" in state:
    return carried_grads(objective, state["params"], batch, rng,
                         state["memory"])
  return (*accumulated_grads(objective, state["params"], batch, rng, micro,
                             mesh, rules), None)


def init_rng(seed: int) -> jax.Array:
  """The key params are initialized from."""
  return jax.random.split(jax.random.key(seed))[0]


def step_root(seed: int) -> jax.Array:
  """The key each step's rng (dropout, corruption) is folded from."""
  return jax.random.split(jax.random.key(seed))[1]


def guarded_update(tx, ok, grads, params, opt_state):
  """`tx`'s update applied when `ok`, else params and state unchanged.

  A `lax.cond` rather than a `where` over every leaf: the skip branch costs
  nothing and the taken one updates the donated buffers in place (a
  per-leaf select was a third of the AdamW time of a T5-small step).
  """
  def apply(args):
    g, p, s = args
    updates, s = tx.update(g, s, p)
    return optax.apply_updates(p, updates), s

  return jax.lax.cond(ok, apply, lambda args: (args[1], args[2]),
                      (grads, params, opt_state))


def make_train_step(objective, tx, config, setup: Setup, lr_fn):
  """The jitted, donated step `(state, batch) -> (state, metrics)`.

  `batch` holds global int32 `[B, T]` arrays; `metrics` the objective's
  sums plus per-step `step_loss`, `grad_norm`, `lr`, `steps` (=1) and
  `nonfinite` (1 when the update was not applied; a carried `memory` then
  stays as it was too).
  """
  micro, seed = int(config.microbatches), int(config.seed)
  tx = optim.freeze(tx, objective.frozen)  # as setup_state's state was made
  if "memory" in setup.abstract and micro > 1:
    raise ValueError(f"objective {config.objective!r} carries a memory from "
                     f"step to step, row by row; it trains with "
                     f"microbatches=1, not {micro}")

  def step(state, batch):
    rng = jax.random.fold_in(step_root(seed), state["step"])
    grads, loss, metrics, carry = step_grads(
        objective, state, batch, rng, micro, setup.mesh, setup.rules)
    grad_norm = optax.tree.norm(grads)
    ok = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
    params, opt_state = guarded_update(tx, ok, grads, state["params"],
                                       state["opt_state"])
    bad = jnp.where((state["bad_step"] < 0) & ~ok, state["step"] + 1,
                    state["bad_step"])
    new = {"step": state["step"] + 1, "params": params,
           "opt_state": opt_state, "bad_step": bad}
    if carry is not None:
      new["memory"] = jax.tree_util.tree_map(
          lambda n, o: jnp.where(ok, n, o), carry, state["memory"])
    metrics = dict(metrics, step_loss=loss, grad_norm=grad_norm,
                   lr=lr_fn(state["step"]), steps=jnp.float32(1),
                   nonfinite=(~ok).astype(jnp.float32))
    return new, jax.tree_util.tree_map(
        lambda m: jnp.asarray(m, jnp.float32), metrics)

  rep = sharding.replicated(setup.mesh)
  return jax.jit(step, in_shardings=(setup.shardings, setup.batch_sharding),
                 out_shardings=(setup.shardings, rep), donate_argnums=0)


def make_eval_step(objective, config, setup: Setup):
  """Jitted `(params, batch, index, carry) -> (metric sums, carry)`, no
  dropout. `carry` is what the objective carries across steps (a
  Transformer-XL's memory: `empty_carry` at the start of a pass, then the
  step's output), or None for an objective that carries nothing."""
  seed = int(config.seed)

  def step(params, batch, index, carry):
    rng = jax.random.fold_in(jax.random.key(seed + 1), index)
    if carry is None:
      loss, metrics = objective.loss(params, batch, rng, deterministic=True)
    else:
      loss, metrics, carry = objective.loss_carry(params, batch, rng, carry,
                                                  deterministic=True)
    metrics = dict(metrics, step_loss=loss, steps=1.0)
    return jax.tree_util.tree_map(lambda m: jnp.asarray(m, jnp.float32),
                                  metrics), carry

  carried = setup.shardings.get("memory")
  return jax.jit(step, in_shardings=(setup.shardings["params"],
                                     setup.batch_sharding, None, carried),
                 out_shardings=(sharding.replicated(setup.mesh), carried))


def empty_carry(setup: Setup):
  """The carry an evaluation pass starts from: the objective's empty memory
  (zeros, sharded like the train state's), or None."""
  if "memory" not in setup.abstract:
    return None
  return jax.jit(lambda: jax.tree_util.tree_map(
      lambda a: jnp.zeros(a.shape, a.dtype), setup.abstract["memory"]),
                 out_shardings=setup.shardings["memory"])()


@jax.jit
def add_metrics(a, b):
  """Elementwise sum of two metric dicts (same keys)."""
  return jax.tree_util.tree_map(jnp.add, a, b)

