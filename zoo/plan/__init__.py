"""Plans for TPU pods, made on a CPU: the real training step, compiled ahead
of time for a pod topology, with what it needs per chip.

    python -m zoo.plan --config configs/t5_span.py:base --topology v5p:4x4x4 \\
        [--num_slices 2] [--config.batch_size=256 ...]

`make_plan` builds the step exactly as `zoo.train` does (objective, AdamW,
logical shardings from the config's mesh and rules, `train_lib`'s jitted,
donated step), over the topology's devices instead of this host's, and
compiles it with the TPU compiler for abstract params, optimizer state and
batch. No array is materialised and no TPU is touched: libtpu describes the
topology and compiles. What comes back is the compiler's own account:
per-chip bytes of the state and temporaries, FLOPs, the collectives and
their bytes, and a roofline step time from the chip's published figures
(`zoo.plan.chips`).
"""

import dataclasses
import math
import time

import jax
import jax.numpy as jnp

import objectives
from data import batch as batch_lib
from zoo import compile_cache
from zoo import config as config_lib
from zoo import optim
from zoo import precision
from zoo import sharding
from zoo import train_lib as lib
from zoo.plan import chips as chips_lib
from zoo.plan import flops
from zoo.plan import hlo
from zoo.plan.report import Plan, PlanDoesNotFit

__all__ = ["Plan", "PlanDoesNotFit", "make_plan", "lower_step",
           "compile_lowered"]


def _abstract(setup, config):
  """ShapeDtypeStructs of the state and a global batch, with shardings."""
  state = jax.tree_util.tree_map(
      lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
      setup.abstract, setup.shardings)
  shape = (int(config.batch_size), int(config.seq_len))
  batch = {k: jax.ShapeDtypeStruct(shape, jnp.int32,
                                   sharding=setup.batch_sharding)
           for k in batch_lib.KEYS}
  return state, batch


def lower_step(config, devices, platform: str = "tpu"):
  """The trainer's step for `config`, lowered for a mesh over `devices`.

  Args:
    config: a training config (`zoo.config` keys).
    devices: the mesh's devices (e.g. `chips.devices(...)`).
    platform: the backend the precision policy reads.

  Returns:
    (lowered step, `train_lib.Setup`, mesh, host count, the step's matmul
    FLOPs over all chips).

  Raises:
    ValueError: the mesh, rules or batch size do not fit the devices.
  """
  config = config_lib.complete(config)
  mesh = sharding.make_mesh(config.mesh, devices)
  hosts = len({d.process_index for d in devices})
  lib.check_config(config, mesh, processes=hosts)
  specials = objectives.Specials(vocab_size=int(config.data.vocab_size))
  objective = lib.build_objective(config, specials, platform=platform)
  steps = int(config.steps)
  tx = optim.make(config.optimizer, steps)
  setup = lib.setup_state(objective, tx, config, mesh)
  step = lib.make_train_step(objective, tx, config, setup,
                             optim.schedule(config.optimizer, steps))
  state, batch = _abstract(setup, config)
  with sharding.activate(mesh, setup.rules):
    traced = step.trace(state, batch)
    return traced.lower(), setup, mesh, hosts, flops.count(traced.jaxpr)


def compile_lowered(lowered):
  """(compiled, seconds): the TPU compile, kept out of the persistent
  cache (a TPU executable cannot be loaded back on this host)."""
  start = time.time()
  with compile_cache.suspended():
    compiled = lowered.compile()
  return compiled, time.time() - start


def _per_chip(abstract, shardings) -> list[dict]:
  """Each state leaf: its path, global shape and bytes on one chip."""
  out = []
  flat = jax.tree_util.tree_flatten_with_path(abstract)[0]
  for (path, leaf), shard in zip(flat, jax.tree_util.tree_leaves(shardings)):
    local = shard.shard_shape(leaf.shape)
    out.append({"name": jax.tree_util.keystr(path), "shape": list(leaf.shape),
                "bytes": math.prod(local) * jnp.dtype(leaf.dtype).itemsize})
  return out


def _out_of_memory(error, chip, lowered, state: list[dict]) -> PlanDoesNotFit:
  """The compiler's refusal, with the largest state leaves (per chip) and
  the largest arrays of the program (global shapes, before sharding)."""
  leaves = ", ".join(f"{v['name']} {v['bytes'] / chips_lib.GiB:.2f} GiB"
                     for v in state[:3])
  values = hlo.largest_values(
      lowered.as_text(dialect="hlo", debug_info=True), top=3)
  arrays = ", ".join(f"{v['type']} from {v['op']}" for v in values)
  message = str(error).split("\n")[0].rstrip(".")
  return PlanDoesNotFit(
      f"the step does not fit a {chip.name} chip's "
      f"{chip.hbm_bytes / chips_lib.GiB:.2f} GiB of HBM; the TPU compiler "
      f"says: {message}. Largest state per chip: {leaves}. Largest arrays "
      f"(global, before sharding): {arrays}. Shard the state further (mesh "
      "fsdp), split the batch (microbatches), or use more chips")


def make_plan(config, topology: str, num_slices: int = 1) -> Plan:
  """Compiles `config`'s training step for `num_slices` x `topology`.

  Args:
    config: a training config; its mesh (one axis -1 takes the rest of the
      chips) and rules shard the state and batch.
    topology: "CHIP:AxB[xC]" of `zoo.plan.chips.CHIPS`, e.g. "v5e:4x4".
    num_slices: slices joined by the data-center network; `data` spans them.

  Returns:
    The Plan (`plan.check()` raises when its total exceeds the HBM).

  Raises:
    PlanDoesNotFit: the TPU compiler ran out of HBM.
    ValueError: a bad topology, or a mesh, rules or batch the chips cannot
      run.
  """
  config = config_lib.complete(config)
  chip, devices = chips_lib.devices(topology, num_slices)
  lowered, setup, mesh, hosts, model_flops = lower_step(config, devices)
  leaves = {k: _per_chip(setup.abstract[k], setup.shardings[k])
            for k in ("params", "opt_state")}
  largest = sorted(leaves["params"] + leaves["opt_state"],
                   key=lambda v: -v["bytes"])[:5]
  try:
    compiled, seconds = compile_lowered(lowered)
  except jax.errors.JaxRuntimeError as e:
    if "RESOURCE_EXHAUSTED" not in str(e):
      raise
    raise _out_of_memory(e, chip, lowered, largest) from None
  memory = compiled.memory_analysis()
  cost = compiled.cost_analysis()
  cost = (cost[0] if cost else {}) if isinstance(cost, (list, tuple)) else cost
  text = compiled.as_text()
  dtype = precision.resolve(dict(config.model_args), "tpu").get(
      "dtype", "float32")
  return Plan(
      topology=topology, num_slices=num_slices, chip=chip,
      chips=len(devices), hosts=hosts, mesh=dict(mesh.shape), dtype=dtype,
      model=str(config.model), size=str(config.size),
      objective=str(config.objective), batch_size=int(config.batch_size),
      seq_len=int(config.seq_len), compile_s=seconds,
      param_bytes=sum(v["bytes"] for v in leaves["params"]),
      opt_bytes=sum(v["bytes"] for v in leaves["opt_state"]),
      argument_bytes=memory.argument_size_in_bytes,
      output_bytes=memory.output_size_in_bytes,
      alias_bytes=memory.alias_size_in_bytes,
      temp_bytes=memory.temp_size_in_bytes,
      code_bytes=memory.generated_code_size_in_bytes,
      flops=model_flops / len(devices),
      compiled_flops=float(cost.get("flops", 0.0)),
      bytes_accessed=float(cost.get("bytes accessed", 0.0)),
      collectives=hlo.collectives(text, num_slices), loops=hlo.loops(text),
      largest_state=largest, largest_values=hlo.largest_values(text))


def remat_table(config, topology: str, num_slices: int = 1) -> list[dict]:
  """The step planned under each remat policy (`blocks.REMAT`): compile
  time, temporaries, total bytes per chip and the roofline step, or the
  compiler's refusal; the config's own `scan_layers` and the rest kept."""
  from zoo import models  # pylint: disable=import-outside-toplevel
  from zoo.models import blocks  # pylint: disable=import-outside-toplevel
  family = config_lib.complete(config).model
  fields = {f.name for f in dataclasses.fields(models.get(family).Config)}
  if "remat" not in fields:
    raise ValueError(f"{family} has no remat policies to compare (its Config "
                     "has no `remat` field; a Reformer's reversible layers "
                     "recompute activations instead: model_args.reversible)")
  rows = []
  for policy in blocks.REMAT:
    c = config_lib.complete(config).as_configdict()
    c.unlock()
    c.model_args.remat = policy
    try:
      p = make_plan(c, topology, num_slices)
      rows.append({"remat": policy, "compile_s": p.compile_s,
                   "temp_bytes": p.temp_bytes, "total_bytes": p.total_bytes,
                   "fits": p.fits, "step_s": p.roofline()["step_s"]})
    except PlanDoesNotFit:
      rows.append({"remat": policy, "fits": False})
  return rows
