"""The zoo's side of `train_step.py`: the one trainer's step, timed.

Builds the run exactly as `zoo.train` does (config file, synthetic loader,
objective, AdamW, sharded init, `train_lib.make_train_step`) and times the
jitted, donated step on one fixed batch.
"""

import importlib
from typing import Any

import jax
import ml_collections

import _common  # pylint: disable=g-bad-import-order
from zoo import optim
from zoo.models import cpu_attention
from zoo import sharding
from zoo import train_lib as lib

# Benchmark name -> (config module, zoo size, vocab size of the reference).
SPECS = {
    "bert-base": ("configs.bert_mlm", "base", 30522),
    "bert-large": ("configs.bert_mlm", "large", 30522),
    "gpt2-small": ("configs.gpt2_clm", "small", 50257),
    "gpt2-medium": ("configs.gpt2_clm", "base", 50257),
    "t5-small": ("configs.t5_span", "small", 32128),
    "t5-base": ("configs.t5_span", "base", 32128),
}


def objective_of(name: str) -> str:
  """The scheme benchmark `name` trains (its config file's)."""
  return importlib.import_module(SPECS[name][0]).get_config(None).objective


def speed_args(name: str, attention_impl: str = "auto",
               scan_layers: bool = False, attention_dropout: bool = True
               ) -> dict[str, Any]:
  """Model Config overrides: attention kernel, layer scan, attention dropout.

  Dropout on attention probabilities forces the einsum path, so fused
  kernels need `attention_dropout=False` (T5 shares one rate for all its
  dropout, so there it turns all dropout off, as T5 v1.1 pre-training did).
  """
  args = {"attention_impl": attention_impl, "scan_layers": scan_layers}
  if not attention_dropout:
    family = SPECS[name][0].rsplit(".", 1)[-1].split("_")[0]
    rate = "dropout_rate" if family == "t5" else "attention_dropout_rate"
    args[rate] = 0.0
  return args


def make_config(name: str, dtype: str, batch: int, seq_len: int,
                size: str | None = None, model_args: dict | None = None,
                vocab_size: int | None = None) -> ml_collections.ConfigDict:
  """The training config of benchmark `name` on synthetic data (vocabulary:
  `vocab_size`, else 512 at the tiny size and the reference's otherwise)."""
  module, default_size, vocab = SPECS[name]
  c = importlib.import_module(module).get_config(None)
  c.size = size or default_size
  c.batch_size, c.seq_len, c.steps = batch, seq_len, 1000
  c.data.source = "synthetic"
  c.data.vocab_size = vocab_size or (512 if size == "tiny" else vocab)
  c.mesh = ml_collections.ConfigDict({"data": -1, "fsdp": 1, "tensor": 1})
  c.model_args = ml_collections.ConfigDict(dict(model_args or {},
                                                dtype=dtype))
  return c


def build(config) -> dict[str, Any]:
  """Objective, jitted step, initial state and a global batch of `config`."""
  mesh = sharding.make_mesh(config.mesh)
  rows = int(config.batch_size)
  loader = lib.build_loader(config, "train", rows, int(config.seed))
  objective = lib.build_objective(config, lib.specials_of(config, loader))
  tx = optim.make(config.optimizer, int(config.steps))
  setup = lib.setup_state(objective, tx, config, mesh)
  jitted = lib.make_train_step(objective, tx, config, setup,
                               optim.schedule(config.optimizer,
                                              int(config.steps)))

  def step(state, batch):  # traced as `zoo.train` traces it: mesh active
    with sharding.activate(mesh, setup.rules):
      return jitted(state, batch)

  batch = lib.global_batch(next(loader), setup.batch_sharding, rows)
  return {"objective": objective, "setup": setup, "step": step,
          "batch": batch, "state": setup.init(lib.init_rng(int(config.seed)))}


def model_flops(run: dict[str, Any]) -> float:
  """3 x XLA's FLOP count of the deterministic forward loss (fwd + bwd),
  traced with dense attention: XLA counts nothing inside the CPU attention
  kernel's custom call, and the kernel does the dense attention's work."""
  objective, setup = run["objective"], run["setup"]
  loss = lambda p, b, r: objective.loss(p, b, r, deterministic=True)[0]
  with cpu_attention.off():
    return 3.0 * _common.forward_flops(loss, setup.abstract["params"],
                                       run["batch"], jax.random.key(0))


def shapes_of(objective, batch: int, seq_len: int) -> dict[str, Any]:
  """What the reference needs to mirror the zoo run: config and lengths."""
  target = getattr(objective, "target_length", None)
  return {"config": objective.config, "batch": batch, "seq_len": seq_len,
          "dec_len": target(seq_len) if callable(target) else seq_len}


def reference_shapes(name: str, batch: int, seq_len: int,
                     size: str | None = None,
                     model_args: dict | None = None) -> dict[str, Any]:
  """`shapes_of` the zoo run of `name`, without building params or a step."""
  config = make_config(name, "float32", batch, seq_len, size, model_args)
  loader = lib.build_loader(config, "train", batch, int(config.seed))
  objective = lib.build_objective(config, lib.specials_of(config, loader))
  return shapes_of(objective, batch, seq_len)


def prepare_step(name: str, dtype: str, batch: int, seq_len: int,
                 size: str | None = None, model_args: dict | None = None,
                 vocab_size: int | None = None):
  """One train step ready to time: `(step_fn, flops, shapes)`.

  Args:
    name: a key of `SPECS`.
    dtype: the model's compute dtype name.
    batch: B rows per step.
    seq_len: T.
    size: overrides the spec's zoo size (e.g. "tiny" for a dry run).
    model_args: more model Config overrides (e.g. attention_impl).
    vocab_size: overrides the vocabulary (`make_config`).

  Returns:
    `step_fn()` runs one donated step and blocks until it is done (the
    first call compiles); `flops` its model FLOPs; `shapes` what the
    reference needs to mirror it.
  """
  run = build(make_config(name, dtype, batch, seq_len, size, model_args,
                          vocab_size))
  flops = model_flops(run)
  holder = {"state": run["state"]}

  def one():
    holder["state"], metrics = run["step"](holder["state"], run["batch"])
    jax.block_until_ready(metrics)

  return one, flops, shapes_of(run["objective"], batch, seq_len)
