"""The one trainer: any (model, objective) pair on any device mesh.

    python -m zoo.train --config configs/bert_mlm.py:tiny --workdir DIR \\
        [--config.steps=100 ...] \\
        [--coordinator_address HOST:PORT --num_processes N --process_id I]

Or from Python: `train(config, workdir) -> dict of final metrics`, and
`evaluate(config, workdir)`: a checkpoint's validation metrics under a config
(a Transformer-XL read with another memory length, say).

A rerun of the same command in the same workdir resumes from the latest
complete checkpoint, exactly: params, optimizer, step, and the data stream.
"""

import json
import os
import sys
import time

import jax
import numpy as np
from absl import app, flags, logging
from ml_collections import config_flags
from tqdm import tqdm

from zoo import checkpoint as ckpt_lib
from zoo import compile_cache
from zoo import config as config_lib
from zoo import distributed, optim, sharding
from zoo import train_lib as lib
from zoo.metrics_log import MetricsLog, summarize
from zoo.plan import chips as chips_lib
from zoo.plan import flops

# Wall-clock figures of the train log: they differ between two runs of the
# same config (and between a run and its resumption).
SPEED_KEYS = ("tokens_per_s", "tokens_per_s_per_chip", "mfu")


class _Evaluator:
  """Passes over the validation split from its start, each the same rows.

  A memory the objective carries (Transformer-XL) starts empty at the
  start of each pass and goes on from batch to batch, as in training.
  """

  def __init__(self, config, setup, eval_step, loader):
    self.setup, self.step, self.loader = setup, eval_step, loader
    self.rows = int(config.batch_size)
    self.seq_len, self.data = int(config.seq_len), config.data
    self.start = loader.get_state()

  def __call__(self, params, batches: int) -> dict[str, float]:
    """Summarized metric sums of the first `batches` batches (fewer when
    the split runs out first)."""
    self.loader.set_state(self.start)
    acc, carry = None, lib.empty_carry(self.setup)
    local_rows = self.rows // jax.process_count()
    for index in range(batches):
      local = next(self.loader, None)
      # Every process runs the same steps (each one is a collective): one
      # whose share of the split ran out feeds padding rows (weight 0)
      # until every share has.
      if not any(distributed.allgather_json(local is not None)):
        break  # a split shorter than `batches` batches
      if local is None:
        local = lib.example_batch(self.seq_len, local_rows, self.data)
        local = {k: np.zeros_like(v) for k, v in local.items()}
      batch = lib.global_batch(local, self.setup.batch_sharding, self.rows)
      metrics, carry = self.step(params, batch, index, carry)
      acc = metrics if acc is None else lib.add_metrics(acc, metrics)
    if acc is None:
      raise ValueError("the validation split yielded no batch; set "
                       "config.eval_steps=0 to train without evaluation")
    return summarize(jax.device_get(acc))


class _Run:
  """The state of one call to `train`: loaders, jitted steps, writers."""

  def __init__(self, config, workdir: str):
    self.config, self.workdir = config, workdir
    self.mesh = sharding.make_mesh(config.mesh)
    lib.check_config(config, self.mesh)
    self.rows = int(config.batch_size)
    self.local_rows = self.rows // jax.process_count()
    self.feeds = sharding.process_rows(self.mesh, config.rules, self.rows)
    self.loader = lib.build_loader(config, "train", self.local_rows,
                                   int(config.seed), self.feeds)
    self.objective = lib.build_objective(
        config, lib.specials_of(config, self.loader),
        getattr(self.loader, "tokenizer", None))
    steps = int(config.steps)
    self.tx = optim.make(config.optimizer, steps)
    self.setup = lib.setup_state(self.objective, self.tx, config, self.mesh)
    self.train_step = lib.make_train_step(
        self.objective, self.tx, config, self.setup,
        optim.schedule(config.optimizer, steps))
    self.eval_step = lib.make_eval_step(self.objective, config, self.setup)
    self.ckpt = ckpt_lib.Checkpointer(
        workdir, keep=int(config.keep_checkpoints))
    self.log = MetricsLog(workdir, enabled=distributed.is_main())
    self.valid = None  # an _Evaluator, built at the first evaluation
    self.flops = None  # matmul FLOPs of one step, counted at the first one

  def start(self):
    """The restored state and step, or a fresh sharded init at 0."""
    latest = self.ckpt.latest_step()
    if latest is None:
      state = self.setup.init(lib.init_rng(int(self.config.seed)))
      return lib.warm_start(self.objective, state, self.setup), 0
    target = ckpt_lib.with_shardings(self.setup.abstract, self.setup.shardings)
    state, meta = self.ckpt.restore(latest, target)
    # Rows are addressed globally: any number of processes resumes. An
    # imported workdir's step-0 checkpoint (zoo.convert.workdir) has no
    # data state yet: its stream starts at the beginning.
    if meta.get("data") is not None:
      self.loader.restore(meta["data"])
    if distributed.is_main():
      print(f"resumed from step {latest} in {self.workdir}", file=sys.stderr)
    return state, latest

  def check_finite(self, state) -> None:
    """Stops the run if some step had a non-finite loss or gradient."""
    if self.config.skip_nonfinite:
      return
    bad = int(jax.device_get(state["bad_step"]))
    if bad >= 0:
      self.ckpt.wait()
      last = self.ckpt.latest_step()
      kept = (f"its last good checkpoint (step {last}) kept in "
              f"{self.ckpt.directory}" if last is not None else
              f"no checkpoint written yet in {self.ckpt.directory}")
      raise FloatingPointError(
          f"non-finite loss or gradient at step {bad}; the run stopped with "
          f"{kept}. Set config.skip_nonfinite=True to skip such updates "
          "instead")

  def save(self, state, step: int) -> None:
    """Starts an async checkpoint of `state` with every process's data state."""
    self.check_finite(state)
    meta = {"step": step, "seed": int(self.config.seed),
            "data": distributed.allgather_json(self.loader.get_state()),
            "config": json.loads(self.config.to_json_best_effort())}
    self.ckpt.save(step, state, meta)

  def evaluate(self, params) -> dict[str, float]:
    """Metrics over the first `eval_steps` validation batches."""
    if self.valid is None:
      self.valid = _Evaluator(self.config, self.setup, self.eval_step,
                              lib.build_loader(self.config, "validation",
                                               self.local_rows,
                                               int(self.config.seed),
                                               self.feeds))
    return self.valid(params, int(self.config.eval_steps))

  def loop(self, state, step: int) -> dict[str, float]:
    """Trains from `step` to `config.steps`; returns the last metrics."""
    config, steps = self.config, int(self.config.steps)
    log_every = max(int(config.log_every), 1)
    every = lambda n, k: k > 0 and n % k == 0
    final, acc, mark = {"step": step}, None, (time.time(), step)
    bar = tqdm(total=steps, initial=step, disable=not distributed.is_main(),
               dynamic_ncols=True, desc="train")
    while step < steps:
      batch = lib.global_batch(next(self.loader), self.setup.batch_sharding,
                               self.rows)
      if self.flops is None:  # the step's matmul FLOPs, from its jaxpr
        self.flops = flops.count(self.train_step.trace(state, batch).jaxpr)
      state, metrics = self.train_step(state, batch)
      acc = metrics if acc is None else lib.add_metrics(acc, metrics)
      step += 1
      bar.update(1)
      if every(step, log_every) or step == steps:
        self.check_finite(state)
        scalars = summarize(jax.device_get(acc))
        now = time.time()
        scalars.update(self.speed(step - mark[1], now - mark[0]))
        acc, mark = None, (now, step)
        self.log.write(step, "train", scalars)
        bar.set_postfix(loss=f"{scalars['loss']:.4f}",
                        tok_s=f"{scalars['tokens_per_s']:.0f}")
        final.update(scalars, step=step)
      if int(config.eval_steps) > 0 and (
          every(step, int(config.eval_every)) or step == steps):
        scalars = self.evaluate(state["params"])
        self.log.write(step, "eval", scalars)
        final.update({f"eval_{k}": v for k, v in scalars.items()})
      if every(step, int(config.checkpoint_every)) or step == steps:
        self.save(state, step)
    bar.close()
    return final

  def speed(self, steps: int, seconds: float) -> dict[str, float]:
    """Throughput of `steps` steps in `seconds`: tokens/s overall and per
    chip, and MFU where the chip's peak is known (`zoo.plan.chips`)."""
    tokens = steps * self.rows * int(self.config.seq_len) / seconds
    chips = jax.device_count()
    out = {"tokens_per_s": tokens, "tokens_per_s_per_chip": tokens / chips}
    chip = chips_lib.of_device(jax.devices()[0])
    if chip is not None and self.flops:
      out["mfu"] = self.flops * steps / seconds / (chips * chip.peak_flops)
    return out

  def close(self) -> None:
    """Waits for pending checkpoints and closes the writers."""
    self.ckpt.close()
    self.log.close()


def train(config, workdir: str) -> dict[str, float]:
  """Trains `config` in `workdir`, resuming from its latest checkpoint.

  Args:
    config: an ml_collections ConfigDict (or a dict) with the keys of
      `zoo.config.base_config` (`model`, `objective`, `steps`, `batch_size`
      and `seq_len` required; the others default there).
    workdir: where config.json, checkpoints/, metrics.jsonl and
      tensorboard/ go. Every process must see the same directory.

  Returns:
    The last logged train scalars (`loss`, `grad_norm`, `lr`,
    `tokens_per_s`, `tokens_per_s_per_chip`, `mfu` on chips with a known
    peak, the objective's ratios), `eval_*` ones, and `step`.

  Raises:
    FloatingPointError: a non-finite loss, unless `skip_nonfinite`.
    ValueError: a config with a missing, unknown or ill-typed key, or one
      the mesh, rules or batch size cannot run.
  """
  config = config_lib.complete(config)
  run = _Run(config, workdir)
  try:
    ckpt_lib.write_config(workdir, config)
    tokenizer = getattr(run.loader, "tokenizer", None)
    if tokenizer is not None and distributed.is_main():
      tokenizer.save(os.path.join(workdir, "tokenizer"))
    # Init runs outside the rules context: there, Flax would constrain each
    # param as it is created, which out_shardings already does.
    state, step = run.start()
    with sharding.activate(run.mesh, run.setup.rules):
      return run.loop(state, step)
  finally:
    run.close()


def evaluate(config, workdir: str, step: int | None = None,
             batches: int | None = None) -> dict[str, float]:
  """Validation metrics of a workdir's checkpoint, read under `config`.

  `config` is usually the run's own (`zoo.checkpoint.read_config`) with
  something changed that its params do not depend on: a Transformer-XL
  read with a longer memory (`model_args.mem_len`) or with none
  (`objective_args.memory=False`). Reads one pass over the validation
  split, or its first `batches` batches; a carried memory starts empty.
  One process (params are restored whole, then sharded).

  Returns:
    The summarized sums, as `train` logs them: `loss` (mean per target),
    the objective's ratios, `steps`.
  """
  config = config_lib.complete(config)
  if jax.process_count() > 1:
    raise ValueError("zoo.train.evaluate runs in one process; evaluate a "
                     "multi-process run through config.eval_steps")
  mesh = sharding.make_mesh(config.mesh)
  lib.check_config(config, mesh)
  rows = int(config.batch_size)
  loader = lib.build_loader(config, "validation", rows, int(config.seed),
                            sharding.process_rows(mesh, config.rules, rows))
  objective = lib.build_objective(config, lib.specials_of(config, loader),
                                  getattr(loader, "tokenizer", None))
  setup = lib.setup_state(
      objective, optim.make(config.optimizer, int(config.steps)), config,
      mesh)
  params, _ = ckpt_lib.restore_params(workdir, step)
  params = jax.device_put(params, setup.shardings["params"])
  evaluator = _Evaluator(config, setup,
                         lib.make_eval_step(objective, config, setup), loader)
  with sharding.activate(mesh, setup.rules):
    return evaluator(params, batches if batches is not None else 2**31 - 1)


_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Python config file with get_config(arg), as path[:arg].",
    lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Where the run writes.")
_COORDINATOR = flags.DEFINE_string(
    "coordinator_address", None, "HOST:PORT of process 0 (multi-process).")
_NUM_PROCESSES = flags.DEFINE_integer(
    "num_processes", None, "Number of processes (multi-process).")
_PROCESS_ID = flags.DEFINE_integer(
    "process_id", None, "This process's index (multi-process).")
COMPILE_CACHE = flags.DEFINE_bool(
    "compile_cache", True, "Keep compiled programs on disk and reuse them "
    "(zoo.compile_cache: $ZOO_COMPILE_CACHE, else <data dir>/jax_cache).")


def main(argv) -> None:
  """The CLI: starts the runtime, then trains the flag's config."""
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments {argv[1:]}")
  if _CONFIG.value is None or _WORKDIR.value is None:
    raise app.UsageError("--config and --workdir are required")
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)  # Orbax logs each save at INFO
  if COMPILE_CACHE.value:
    compile_cache.enable()
  distributed.initialize(_COORDINATOR.value, _NUM_PROCESSES.value,
                         _PROCESS_ID.value)
  final = train(_CONFIG.value, _WORKDIR.value)
  if distributed.is_main():
    print(json.dumps(final))


def run() -> None:
  """Entry point: parses flags and runs `main`."""
  app.run(main)


if __name__ == "__main__":
  run()
