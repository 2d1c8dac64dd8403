"""A Hugging Face folder as a zoo workdir: continued pre-training from it.

    zoo.convert.workdir.hf_to_workdir("path/to/hf_folder", "workdirs/run")
    python -m zoo.train --config configs/workdir.py:workdirs/run \\
        --workdir workdirs/run --config.steps=1000

The workdir holds what a run of the trainer leaves: `config.json` (the
imported network as `model_args`, the folder's tokenizer as
`data.tokenizer`), `tokenizer/` and a step-0 checkpoint whose scheme model
params are the checkpoint's. The trainer resumes it (its data stream starts
at the beginning: the checkpoint's meta has `"data": None`), and `zoo.load`
and fine-tuning read it as any workdir.

Params are placed by name: every param of the scheme's model that the
checkpoint holds is taken from it (shapes checked); heads the checkpoint
lacks (a pooler, the scheme's own heads) keep the scheme's fresh init, and
checkpoint weights the scheme has no place for (an NSP head under MLM) are
reported and dropped. A tokenizer smaller than the model's vocabulary
(T5's 32100 ids in a 32128-row table) keeps the table's first rows.
"""

import dataclasses
import json
import logging
import os
import pathlib

import flax.linen as nn
import jax
import numpy as np

import objectives
from data import tokenizer as tok_lib
from zoo import checkpoint as ckpt_lib
from zoo import config as config_lib
from zoo import convert
from zoo import models
from zoo import optim
from zoo import sharding
from zoo import train_lib
from zoo.convert import common
from zoo.models import blocks

# The scheme a family was pre-trained with, where no objective is given.
DEFAULT_OBJECTIVES = {"bert": "mlm", "roberta": "mlm", "distilbert": "mlm",
                      "albert": "sop", "gpt2": "clm", "t5": "t5_span",
                      "bart": "bart", "xlnet": "plm",
                      "longformer": "mlm", "reformer": "clm",
                      "mobilebert": "mlm"}
# A short continued pre-training; `train_overrides` change any of it.
TRAIN_DEFAULTS = dict(steps=100, batch_size=8, checkpoint_every=50,
                      log_every=10, eval_every=50, eval_steps=2)
OPTIMIZER_DEFAULTS = dict(lr=1e-4, warmup_steps=10)  # gentle on trained weights
SEQ_LEN = 128  # default row length, unless the position table is shorter
# Config fields the run's policy sets, not the checkpoint: the vocabulary
# comes from the tokenizer, the compute dtype from `zoo.precision`.
_NOT_MODEL_ARGS = ("vocab_size", "dtype")
# Families whose position table has `position_offset` rows beyond max_len.
_TABLE_HOLDS_OFFSET = ("bart",)
_TOKENIZER_FILES = ("spm.model", "tokenizer.json", "vocab.txt")

_ELECTRA = (
    "{folder} is an ELECTRA checkpoint: it holds one network (the "
    "discriminator or the generator), while the `electra` scheme trains a "
    "generator and a discriminator together on shared embeddings, so no "
    "train state can be built from it. Fine-tune it instead "
    "(zoo.load / zoo.convert.from_hf), or pre-train ELECTRA from scratch "
    "with configs/electra_electra.py")


def hf_to_workdir(folder, workdir, *, objective: str | None = None,
                  allow_pickle: bool = False, **train_overrides) -> str:
  """Writes a zoo workdir whose step-0 checkpoint is a Hugging Face model.

  Args:
    folder: a Hugging Face model folder (config.json, safetensors weights
      and the tokenizer: tokenizer.json, vocab.txt or spm.model).
    workdir: the new workdir (must not hold a run yet).
    objective: the pre-training scheme; default `DEFAULT_OBJECTIVES` of the
      family.
    allow_pickle: allow `pytorch_model*.bin` (see `zoo.convert.from_hf`).
    **train_overrides: training config keys over the defaults, e.g.
      `steps=1000, seq_len=256, optimizer={"lr": 5e-5},
      model_args={"dropout_rate": 0.0}` (blocks are merged key by key).

  Returns:
    `workdir`.

  Raises:
    FileExistsError: `workdir` already holds a config or checkpoints.
    FileNotFoundError: the folder has no weights or no tokenizer.
    ValueError: an ELECTRA checkpoint, an objective the family cannot
      train, a bad override, or a checkpoint param whose shape differs from
      the scheme model's.
  """
  _check_new(os.fspath(workdir))
  hf_config = convert.read_config(folder)
  mod = convert.find_converter(hf_config)
  if mod.__name__.rsplit(".", 1)[-1] == "electra":
    raise ValueError(_ELECTRA.format(folder=folder))
  tokenizer = load_tokenizer(folder)
  tensors = convert.load_tensors(folder, allow_pickle)
  family, model_config, params = mod.convert(hf_config, tensors)
  return model_to_workdir(family, model_config, params, tokenizer, workdir,
                          objective=objective, source=os.fspath(folder),
                          **train_overrides)


def model_to_workdir(family: str, model_config, params, tokenizer, workdir,
                     *, objective: str | None = None, source: str = "",
                     **train_overrides) -> str:
  """Writes a zoo workdir whose step-0 checkpoint is a network in hand.

  What `hf_to_workdir` does once it has read a folder, for any
  `(family, config, params)`: a model changed in Python (heads removed by
  `zoo.compress.heads.prune_heads`, say) becomes a workdir that `zoo.load`
  reads, `zoo.train` trains on and `zoo.finetune` starts from.

  Args:
    family, model_config, params: the network (params boxed or not, its
      layers unrolled or scanned).
    tokenizer: its tokenizer (`data.tokenizer`; saved into the workdir).
    workdir: the new workdir (must not hold a run yet).
    objective, train_overrides: as for `hf_to_workdir`.
    source: where the network came from (recorded in the checkpoint).

  Returns:
    `workdir`.
  """
  workdir = os.fspath(workdir)
  _check_new(workdir)
  params = blocks.unstack(jax.tree.map(np.asarray, nn.meta.unbox(params)))
  _check_vocab(tokenizer.vocab_size, model_config.vocab_size,
               source or family)
  config = training_config(family, model_config, tokenizer, workdir,
                           objective, train_overrides)
  if config.model_args.get("scan_layers", False):
    params = blocks.restack(params)
  state = imported_state(config, tokenizer, params, model_config.vocab_size)
  tokenizer.save(os.path.join(workdir, "tokenizer"))
  ckpt_lib.write_config(workdir, config)
  ckpt = ckpt_lib.Checkpointer(workdir, keep=int(config.keep_checkpoints))
  try:
    ckpt.save(0, state, {
        "step": 0, "seed": int(config.seed), "data": None,
        "config": json.loads(config.to_json_best_effort()),
        "imported_from": os.path.abspath(source) if source else ""})
  finally:
    ckpt.close()
  return workdir


def _check_new(workdir: str) -> None:
  for name in ("config.json", "checkpoints"):
    if os.path.exists(os.path.join(workdir, name)):
      raise FileExistsError(f"{workdir} already holds {name}; give a new "
                            "workdir (an import never overwrites a run)")


def _check_vocab(vocab: int, hf_vocab: int, folder) -> None:
  if vocab > hf_vocab:
    raise ValueError(
        f"the tokenizer of {folder} has {vocab} ids, more than the "
        f"{hf_vocab} rows of the model's vocabulary: it is not the model's "
        "tokenizer, or the model was saved before its embeddings were "
        "resized (model.resize_token_embeddings(len(tokenizer)))")


def load_tokenizer(folder):
  """The tokenizer of a Hugging Face folder (`data.tokenizer.load_path`).

  Raises:
    FileNotFoundError: the folder holds none of `_TOKENIZER_FILES`.
  """
  try:
    return tok_lib.load_path(folder)
  except FileNotFoundError as e:
    present = sorted(p.name for p in pathlib.Path(folder).iterdir()
                     if "token" in p.name or p.suffix in (".model", ".txt"))
    wanted = ", ".join(_TOKENIZER_FILES)
    raise FileNotFoundError(
        f"{folder} has no tokenizer the zoo reads ({wanted}; found "
        f"{present or 'none'}); a workdir trains on the model's own "
        "tokenizer: save it into the folder, e.g. `AutoTokenizer."
        "from_pretrained(name).save_pretrained(folder)`, which writes "
        "tokenizer.json") from e


def default_objective(family: str) -> str:
  """The scheme `family` was pre-trained with (`DEFAULT_OBJECTIVES`)."""
  if family not in DEFAULT_OBJECTIVES:
    raise ValueError(f"no default objective for {family!r}; pass objective="
                     f"(one of {objectives.names()})")
  return DEFAULT_OBJECTIVES[family]


def training_config(family: str, model_config, tokenizer, workdir: str,
                    objective: str | None, overrides: dict):
  """The completed training config that rebuilds the imported network.

  `model_args` holds every field of `model_config` but the vocabulary (the
  tokenizer's), the dtype (the precision policy's) and the heads the scheme
  sets itself; `scan_layers` is explicit, chosen as `models.make_config`
  would choose it unless `overrides["model_args"]` sets it.
  """
  c = config_lib.base_config()
  c.model, c.objective = family, objective or default_objective(family)
  c.size = _size_name(family, model_config)
  c.update(TRAIN_DEFAULTS)
  c.optimizer.update(OPTIMIZER_DEFAULTS)
  limit = longest_row(family, model_config)
  c.seq_len = SEQ_LEN if limit is None else min(SEQ_LEN, limit)
  c.data.tokenizer = os.path.abspath(os.path.join(workdir, "tokenizer"))
  c.data.vocab_size = int(tokenizer.vocab_size)
  _apply(c, overrides)
  extra = dict(c.model_args)
  c.model_args = _model_args(c, model_config, tokenizer, extra)
  if limit is not None and int(c.seq_len) > limit:
    raise ValueError(f"seq_len {c.seq_len} exceeds the {limit} positions of "
                     f"the imported {family} (max_len "
                     f"{model_config.max_len}); pass seq_len<={limit}")
  return config_lib.complete(c)


def _apply(c, overrides: dict) -> None:
  """Sets `overrides` on config `c`; dict values merge into blocks."""
  for key, value in overrides.items():
    if key not in c:
      raise ValueError(f"unknown training config key {key!r}; keys: "
                       f"{sorted(c.keys())}")
    if isinstance(value, dict):
      c[key].update(value)  # unknown block keys: `complete` names them
    else:
      c[key] = value


def _model_args(c, model_config, tokenizer, extra: dict) -> dict:
  """Config fields of the imported network, then `extra` over them."""
  bad = sorted(set(extra) & {"vocab_size"})
  if bad:
    raise ValueError("model_args.vocab_size is the tokenizer's "
                     f"({tokenizer.vocab_size}); it cannot be overridden")
  args = {f.name: getattr(model_config, f.name)
          for f in dataclasses.fields(model_config)
          if f.name not in _NOT_MODEL_ARGS}
  specials = objectives.Specials(**tokenizer.specials())
  scheme = objectives.build(c.objective, model=c.model, size=c.size,
                            specials=specials, model_args=dict(args, **extra))
  for name in getattr(scheme, "model_overrides", {}):
    args.pop(name, None)  # the scheme's own choice (e.g. no NSP head)
  args.update(extra)
  if "scan_layers" in args and "scan_layers" not in extra:
    unset = {k: v for k, v in args.items() if k != "scan_layers"}
    args["scan_layers"] = models.make_config(c.model, c.size,
                                             **unset).scan_layers
  return args


def _size_name(family: str, model_config) -> str:
  """The first named size whose table matches `model_config`, else "base"
  (or the family's first size); `model_args` pins every field anyway."""
  sizes = getattr(models.get(family), "SIZES", {})
  for name, table in sizes.items():
    if all(getattr(model_config, k, None) == v for k, v in table.items()):
      return name
  return "base" if "base" in sizes else next(iter(sizes))


def longest_row(family: str, model_config) -> int | None:
  """The most positions a row may have, or None (relative positions)."""
  max_len = getattr(model_config, "max_len", None)
  if max_len is None or family in _TABLE_HOLDS_OFFSET:
    return max_len
  return max_len - getattr(model_config, "position_offset", 0)


def imported_state(config, tokenizer, params, hf_vocab: int):
  """The trainer's sharded step-0 state with the checkpoint's params.

  Args:
    config: the completed training config.
    tokenizer: the run's tokenizer (its specials bind the scheme).
    params: the checkpoint's model params (numpy, the scheme model's
      layout: restacked when it scans).
    hf_vocab: the checkpoint's vocabulary size.

  Returns:
    The state dict of `train_lib` (step 0), sharded over a mesh of the
    local devices.
  """
  specials = objectives.Specials(**tokenizer.specials())
  objective = train_lib.build_objective(config, specials, tokenizer)
  tx = optim.make(config.optimizer, int(config.steps))
  mesh = sharding.make_mesh(config.mesh, jax.local_devices())
  setup = train_lib.setup_state(objective, tx, config, mesh)
  state = setup.init(train_lib.init_rng(int(config.seed)))
  for head in sorted(set(state["params"]) - {"model"}):
    logging.info("the %s scheme's head %r starts from its fresh init",
                 config.objective, head)
  state["params"]["model"] = place(state["params"]["model"], params,
                                   hf_vocab, int(tokenizer.vocab_size))
  return state


def place(model_params, checkpoint, hf_vocab: int, vocab: int):
  """`model_params` (sharded jax Arrays) with the checkpoint's values put in.

  Args:
    model_params: the scheme model's freshly initialized params.
    checkpoint: nested dict of numpy arrays from a converter.
    hf_vocab: the checkpoint's vocabulary size.
    vocab: the scheme model's (the tokenizer's); a smaller one keeps the
      first rows of every vocabulary-sized axis.

  Raises:
    ValueError: a checkpoint param's shape differs from the model's.
  """
  have = common.flat(checkpoint)
  paths, treedef = jax.tree_util.tree_flatten_with_path(model_params)
  names = ["/".join(str(getattr(k, "key", k)) for k in p) for p, _ in paths]
  leaves, bad = [], []
  for name, (_, leaf) in zip(names, paths):
    if name not in have:
      leaves.append(leaf)
      continue
    value = _fit(np.asarray(have[name]), leaf.shape, hf_vocab, vocab)
    if value is None:
      bad.append(f"{name}: checkpoint {np.shape(have[name])} vs model "
                 f"{leaf.shape}")
      continue
    leaves.append(jax.device_put(value.astype(leaf.dtype), leaf.sharding))
  if bad:
    raise ValueError(f"checkpoint params do not fit the scheme's model: {bad}")
  _report(sorted(set(names) - set(have)), sorted(set(have) - set(names)))
  return jax.tree_util.tree_unflatten(treedef, leaves)


def _fit(value: np.ndarray, shape, hf_vocab: int, vocab: int):
  """`value` in `shape`: as is, cut to `vocab` rows on its vocabulary axes
  (when the tokenizer is smaller), or None when it does not fit."""
  shape = tuple(shape)
  if value.shape == shape:
    return value
  if vocab >= hf_vocab or value.ndim != len(shape):
    return None
  index = []
  for have, want in zip(value.shape, shape):
    if have != want and (have, want) != (hf_vocab, vocab):
      return None
    index.append(slice(0, want))
  logging.warning("the tokenizer has %d ids, the checkpoint's vocabulary %d: "
                  "keeping its first %d rows", vocab, hf_vocab, vocab)
  return value[tuple(index)]


def _report(fresh: list[str], dropped: list[str]) -> None:
  if fresh:
    logging.info("the checkpoint lacks %d params of the scheme's model; "
                 "they keep their fresh init: %s", len(fresh), fresh)
  if dropped:
    logging.warning("the scheme's model has no place for %d checkpoint "
                    "params; dropped: %s", len(dropped), dropped)
