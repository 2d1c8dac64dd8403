"""Hugging Face export: a zoo model out as a folder transformers loads.

    zoo.convert.to_hf("workdirs/run", "out/")        # its latest checkpoint
    zoo.convert.to_hf(zoo.load("workdirs/run", step=200), "out/")
    zoo.convert.to_hf(("bert", config, params), "out/")

The folder holds `config.json`, `model.safetensors` and, when the source
has a tokenizer, the tokenizer files (`zoo.convert.hf_tokenizer`), so
`transformers.AutoModel*.from_pretrained(folder)` and `AutoTokenizer` load
it offline.

Each family's importer (`zoo/convert/<family>.py`) is the one map between
the two name spaces; export runs it backwards. It builds the reference
model's tensor names and shapes with transformers on the meta device (no
memory, no init), numbers every element, runs the importer over the
numbers, and so learns where each element of every zoo weight lives in the
reference checkpoint. Tied tensors (a token table and its LM head) share
their numbers: one value, stored under every name. The importer must also
read the written config back as the zoo config (runtime fields aside), so
a zoo feature the reference cannot express (adapters, a T5 head that is
scaled but not tied, ...) is refused by name rather than exported wrong.
"""

import dataclasses
import logging
import pathlib
from types import ModuleType
from typing import Any

import jax
import numpy as np
from flax import linen as nn

from zoo.convert import common
from zoo.models import blocks

# Config fields with no bearing on the reference forward: how the zoo runs
# a model (dtype, scanning, remat, kernels), how it initialises one, and
# head switches the chosen architecture already expresses.
RUNTIME_FIELDS = ("dtype", "scan_layers", "remat", "attention_impl",
                  "position_init", "pooler", "nsp_head", "generator_fraction")
# Families without a reference architecture, and what is missing.
NO_REFERENCE = {
    "elmo": "transformers has no ELMo (character CNN + biLSTM) model class",
    "unilm": "transformers has no UniLM class: its attention-mask set "
             "(bidirectional, left-to-right, seq2seq) has no reference "
             "architecture to load into",
    "transfo_xl": "transformers 5 removed its Transformer-XL classes, so "
                  "no installed reference can load one",
}


def exporters() -> dict[str, ModuleType]:
  """Zoo family -> the converter module that exports it."""
  from zoo import convert  # pylint: disable=import-outside-toplevel
  return {f: mod for mod in convert.converters().values()
          for f in getattr(mod, "FAMILIES", ())}


def _modules():
  try:
    import torch  # pylint: disable=import-outside-toplevel
    import transformers  # pylint: disable=import-outside-toplevel
  except ImportError as e:
    raise ImportError(
        "Hugging Face export builds the reference model's layout with "
        "transformers and torch: pip install transformers torch (both are "
        f"in the zoo's `test` extra); missing: {e.name}") from e
  return torch, transformers


def exporter(family: str) -> ModuleType:
  """The converter module of `family`, or a ValueError saying why not."""
  if family in NO_REFERENCE:
    raise ValueError(f"{family} cannot be exported to Hugging Face: "
                     f"{NO_REFERENCE[family]}")
  mods = exporters()
  if family not in mods:
    raise ValueError(f"no Hugging Face export for family {family!r}; "
                     f"exportable: {sorted(mods)}")
  return mods[family]


def skeleton(hf: dict[str, Any], untied: tuple[str, ...] = ()):
  """`(hf_config, groups)` of a reference model built on the meta device.

  Args:
    hf: config fields, with "model_type" and "architectures" ([class]).
    untied: names that get their own storage although the reference class
      ties them (it unties on load when the stored values differ).

  Returns:
    The transformers config object, and every floating tensor as
    `(names, shape)`: the names of one storage (tied names together), in
    state-dict order.
  """
  torch, transformers = _modules()
  fields = dict(hf)
  model_type, arch = fields.pop("model_type"), fields["architectures"][0]
  cfg = transformers.AutoConfig.for_model(model_type, **fields)
  with torch.device("meta"):
    model = getattr(transformers, arch)(cfg)
  state = model.state_dict(keep_vars=True)
  groups: dict[int, list[str]] = {}
  for name, tensor in state.items():
    if tensor.is_floating_point():
      groups.setdefault(name if name in untied else id(tensor),
                        []).append(name)
  return cfg, [(names, tuple(state[names[0]].shape))
               for names in groups.values()]


def numbered(groups) -> tuple[common.IndexTensors, int]:
  """Each group's names -> one block of element numbers (int32 while they
  fit); the total."""
  total = sum(int(np.prod(shape, dtype=np.int64)) for _, shape in groups)
  dtype = np.int32 if total < 2**31 else np.int64  # half the memory
  tensors, offset = common.IndexTensors(), 0
  for names, shape in groups:
    size = int(np.prod(shape, dtype=np.int64))
    block = np.arange(offset, offset + size, dtype=dtype).reshape(shape)
    for name in names:
      tensors[name] = block
    offset += size
  return tensors, offset


def _canonical(config):
  """`config` with defaults that mean another field's value spelt out."""
  if getattr(config, "num_decoder_layers", None) == 0:
    config = dataclasses.replace(config, num_decoder_layers=config.num_layers)
  return config


def check_config(family: str, config, got_family: str, got, arch: str):
  """Refuses a zoo config that the reference config does not reproduce."""
  if got_family != family:
    raise ValueError(f"{arch} reads back as family {got_family!r}, not "
                     f"{family!r}")
  want = _canonical(config)
  got = dataclasses.replace(_canonical(got), **{
      f: getattr(want, f) for f in RUNTIME_FIELDS if hasattr(want, f)})
  diffs = [f"{f.name}={getattr(want, f.name)!r} (the reference reads "
           f"{getattr(got, f.name)!r})" for f in dataclasses.fields(want)
           if getattr(want, f.name) != getattr(got, f.name)]
  if diffs:
    raise ValueError(f"cannot export this {family} model as {arch}: "
                     + "; ".join(diffs) + " has no Hugging Face equivalent")


def scatter(index, params, total: int, arch: str):
  """Zoo values placed at their element numbers: `(values, written)`.

  Raises:
    ValueError: the architecture needs a weight the params lack, a shape
      differs, or two zoo weights tied in the reference disagree.
  """
  where, values = common.flat(index), common.flat(params)
  missing = sorted(set(where) - set(values))
  if missing:
    raise ValueError(f"{arch} needs {missing}, which the params lack")
  extra = sorted(set(values) - set(where))
  if extra:
    logging.warning("not exported (%s has no place for them): %s", arch,
                    extra)
  out, written = np.zeros(total, np.float32), np.zeros(total, bool)
  for path, idx in where.items():
    value = np.asarray(values[path], np.float32)
    if value.shape != idx.shape:
      raise ValueError(f"{path}: params {value.shape} vs {arch} "
                       f"{idx.shape}")
    out[idx.ravel()] = value.ravel()
    written[idx.ravel()] = True
  for path, idx in where.items():
    if not np.array_equal(out[idx], np.asarray(values[path], np.float32)):
      raise ValueError(f"{path} is tied to another weight in {arch}, and "
                       "their values differ")
  return out, written


def _fresh(name: str, shape, rng: np.random.Generator) -> np.ndarray:
  """A reference tensor the zoo model has no values for (a head it lacks)."""
  leaf = name.rsplit(".", 1)[-1]
  if leaf == "bias":
    return np.zeros(shape, np.float32)
  if "norm" in name.lower() or ".ln_" in name:
    return np.ones(shape, np.float32)
  return (rng.standard_normal(shape) * 0.02).astype(np.float32)


def gather(groups, template, values, written) -> dict[str, np.ndarray]:
  """Reference name -> float32 tensor, every tied name its own copy."""
  out, fresh, rng = {}, [], np.random.default_rng(0)
  for names, shape in groups:
    idx = template[names[0]].ravel()
    if written[idx].all():
      tensor = values[idx].reshape(shape)
    elif not written[idx].any():
      tensor = _fresh(names[0], shape, rng)
      fresh.append(names[0])
    else:
      raise ValueError(f"{names[0]} is only partly covered by the zoo "
                       "weights; the importer's map is incomplete")
    for name in names:
      out[name] = tensor.copy()
  if fresh:
    logging.warning("the zoo model has no values for %s; written freshly "
                    "initialised", fresh)
  return out


def hf_tensors(family: str, config, params, token_ids=None):
  """`(hf_config, tensors)` of a zoo model, nothing written.

  Args:
    family: a zoo family with a reference architecture.
    config: its Config.
    params: its params (unboxed; scanned or unrolled layers).
    token_ids: extra config fields, e.g. {"eos_token_id": 1}.
  """
  mod = exporter(family)
  params = jax.device_get(nn.meta.unbox(params))
  params = blocks.unstack(params)
  if hasattr(mod, "prepare_export"):
    config, params = mod.prepare_export(family, config, params)
  arch = mod.architecture(family, config, params)
  hf = dict(mod.hf_config(family, config), architectures=[arch],
            **(token_ids or {}))
  untied = mod.untied(config) if hasattr(mod, "untied") else ()
  cfg, groups = skeleton(hf, untied)
  template, total = numbered(groups)
  got_family, got, index = mod.convert(cfg.to_dict(), template)
  check_config(family, config, got_family, got, arch)
  values, written = scatter(index, params, total, arch)
  return cfg, gather(groups, template, values, written)


def token_ids(tokenizer, vocab_size: int) -> dict[str, Any]:
  """bos/eos config fields, from the tokenizer's specials when there is one.

  Without a tokenizer the reference defaults stand, except ids outside the
  vocabulary (GPT-2's 50256 in a small one), which are cleared.
  """
  if tokenizer is not None:
    specials = tokenizer.specials()
    return {f"{k}_token_id": specials[k] for k in ("bos", "eos")
            if specials.get(k) is not None and specials[k] < vocab_size}
  return {"bos_token_id": None, "eos_token_id": None}


def _resolve(source, step):
  """`(model, tokenizer, companions)` of a workdir, Loaded or tuple."""
  from zoo import loading  # pylint: disable=import-outside-toplevel
  if isinstance(source, tuple):
    if len(source) != 3:
      raise ValueError("a tuple source is (family, config, params)")
    return source, None, {}
  if not isinstance(source, loading.Loaded):
    source = loading.load(source, step)
  elif step is not None:
    raise ValueError("step applies to a workdir path, not a loaded model")
  model = (source.family, source.config, source.params)
  return model, source.tokenizer, source.companions


def to_hf(source, folder, *, step: int | None = None,
          tokenizer=None) -> pathlib.Path:
  """Writes a zoo model as a Hugging Face folder.

  A scheme's other networks go in subfolders: an ELECTRA workdir writes
  its discriminator to `folder` and its generator to `folder/generator`.

  Args:
    source: a workdir or Hugging Face folder path (through `zoo.load`), a
      `zoo.load` result, or `(family, config, params)`.
    folder: the output folder (created).
    step: a workdir checkpoint; None = the latest that restores.
    tokenizer: a zoo tokenizer to write (default: the source's own).

  Returns:
    The folder.
  """
  model, own, companions = _resolve(source, step)
  tokenizer = tokenizer if tokenizer is not None else own
  folder = write(model, folder, tokenizer)
  for name, other in companions.items():
    write(other, folder / name, tokenizer)
  return folder


def write(model, folder, tokenizer=None) -> pathlib.Path:
  """Writes `(family, config, params)` and a tokenizer into `folder`."""
  family, config, params = model
  ids = token_ids(tokenizer, config.vocab_size)
  if tokenizer is None:
    ids = {k: v for k, v in ids.items()
           if _default_id(family, config, k) >= config.vocab_size}
  cfg, tensors = hf_tensors(family, config, params, ids)
  folder = pathlib.Path(folder)
  folder.mkdir(parents=True, exist_ok=True)
  cfg.save_pretrained(str(folder))
  from safetensors.numpy import save_file  # pylint: disable=g-import-not-at-top
  save_file(tensors, str(folder / "model.safetensors"),
            metadata={"format": "pt"})
  if tokenizer is not None:
    from zoo.convert import hf_tokenizer  # pylint: disable=g-import-not-at-top
    hf_tokenizer.save(tokenizer, folder, cfg.model_type)
  return folder


def _default_id(family: str, config, key: str) -> int:
  """The reference config's default for `key` (e.g. "eos_token_id")."""
  mod = exporter(family)
  _, transformers = _modules()
  hf = mod.hf_config(family, config)
  default = getattr(transformers.AutoConfig.for_model(hf["model_type"]), key,
                    None)
  return -1 if default is None else int(default)
