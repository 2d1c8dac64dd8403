"""Hugging Face import and export.

    family, config, params = zoo.convert.from_hf("path/to/folder")
    out = zoo.models.get(family).Model(config).apply({"params": params}, ...)
    zoo.convert.to_hf("workdirs/run", "out/")  # see zoo.convert.export

A folder holds `config.json` and `*.safetensors` (one file, or shards named
by `model.safetensors.index.json`). Weights are read with the safetensors
numpy API; no pickle is ever loaded unless the caller asks for it.

Each supported architecture has a module `zoo/convert/<family>.py` with
`ARCHITECTURES` (Hugging Face class names), `MODEL_TYPES` (config
`model_type` values) and `convert(hf_config, tensors) -> (family, Config,
params)`, params unrolled (`layer_<i>`) as `Model.init` gives them with
`scan_layers=False`. `from_hf` then checks them against the model, fills
heads the checkpoint lacks with a fresh init, applies config overrides and
restacks layers when `scan_layers` is set.
"""

import dataclasses
import importlib
import json
import pathlib
from types import ModuleType
from typing import Any

import numpy as np

from zoo.convert import common
from zoo.models import blocks

# Converter modules, tried in order.
CONVERTERS = ("bert", "gpt2", "distilbert", "albert", "electra", "t5",
              "bart", "xlnet", "longformer", "reformer", "mobilebert")

_PICKLE_HELP = (
    "{folder} has only PyTorch pickle weights ({files}). Loading a pickle can "
    "run arbitrary code, so it is refused. Convert it once to safetensors, "
    "e.g. `python -c \"from transformers import AutoModel; "
    "AutoModel.from_pretrained('{folder}').save_pretrained('{folder}', "
    "safe_serialization=True)\"`, or pass allow_pickle=True to load it with "
    "torch.load(weights_only=True).")


def converters() -> dict[str, ModuleType]:
  """Name -> converter module, for the modules present."""
  out = {}
  for name in CONVERTERS:
    try:
      out[name] = importlib.import_module(f"zoo.convert.{name}")
    except ModuleNotFoundError as e:
      if e.name != f"zoo.convert.{name}":
        raise
  return out


def supported() -> list[str]:
  """Sorted Hugging Face architecture names that `from_hf` converts."""
  return sorted(a for m in converters().values() for a in m.ARCHITECTURES)


def find_converter(hf_config: dict[str, Any]) -> ModuleType:
  """The converter module of a Hugging Face config (by class, then type)."""
  mods = converters().values()
  for arch in hf_config.get("architectures") or ():
    for mod in mods:
      if arch in mod.ARCHITECTURES:
        return mod
  model_type = hf_config.get("model_type")
  for mod in mods:
    if model_type in mod.MODEL_TYPES:
      return mod
  raise ValueError(
      f"unsupported Hugging Face model: architectures="
      f"{hf_config.get('architectures')}, model_type={model_type!r}; "
      f"supported architectures: {supported()}; model types: "
      f"{sorted(t for m in mods for t in m.MODEL_TYPES)}")


def load_tensors(folder, allow_pickle: bool = False) -> dict[str, np.ndarray]:
  """All weight tensors of a folder, name -> numpy array (torch layout).

  Raises:
    FileNotFoundError: no weights at all.
    ValueError: only pickle weights and `allow_pickle` is False.
  """
  folder = pathlib.Path(folder)
  files = _safetensors_files(folder)
  if files:
    from safetensors.numpy import load_file  # pylint: disable=g-import-not-at-top
    tensors = {}
    for f in files:
      tensors.update(load_file(str(f)))
    return tensors
  pickles = sorted(folder.glob("pytorch_model*.bin"))
  if not pickles:
    raise FileNotFoundError(
        f"{folder} holds no weights (*.safetensors or pytorch_model*.bin)")
  if not allow_pickle:
    raise ValueError(_PICKLE_HELP.format(
        folder=folder, files=", ".join(p.name for p in pickles)))
  return _load_torch(pickles)


def _safetensors_files(folder: pathlib.Path) -> list[pathlib.Path]:
  index = folder / "model.safetensors.index.json"
  if index.exists():
    weight_map = json.loads(index.read_text())["weight_map"]
    return [folder / f for f in sorted(set(weight_map.values()))]
  return sorted(folder.glob("*.safetensors"))


def _load_torch(files: list[pathlib.Path]) -> dict[str, np.ndarray]:
  import torch  # pylint: disable=g-import-not-at-top
  tensors = {}
  for f in files:
    state = torch.load(str(f), map_location="cpu", weights_only=True)
    tensors.update({k: v.float().numpy() if v.is_floating_point()
                    else v.numpy() for k, v in state.items()})
  return tensors


def read_config(folder) -> dict[str, Any]:
  """The parsed `config.json` of a Hugging Face model folder."""
  path = pathlib.Path(folder) / "config.json"
  if not path.exists():
    raise FileNotFoundError(f"{path} not found: not a Hugging Face model "
                            "folder")
  return json.loads(path.read_text())


def from_hf(folder, *, allow_pickle: bool = False, **overrides):
  """Converts a Hugging Face model folder to a zoo model.

  Args:
    folder: directory with config.json and safetensors weights.
    allow_pickle: allow `pytorch_model*.bin` (torch.load, weights_only).
    **overrides: Config fields to change, e.g. dtype="bfloat16",
      scan_layers=True, dropout_rate=0.0.

  Returns:
    `(family, config, params)`: params float32 numpy arrays in the tree
    `Model(config).init(...)["params"]` has (unboxed).
  """
  hf_config = read_config(folder)
  mod = find_converter(hf_config)
  tensors = load_tensors(folder, allow_pickle)
  return convert(mod, hf_config, tensors, **overrides)


def convert(mod: ModuleType, hf_config: dict[str, Any],
            tensors: dict[str, np.ndarray], **overrides):
  """`from_hf` on an already read config and tensors (see there)."""
  family, config, params = mod.convert(hf_config, tensors)
  config = dataclasses.replace(config, **overrides)
  unrolled = dataclasses.replace(config, scan_layers=False)
  params = common.check_and_fill(family, unrolled, params)
  if config.scan_layers:
    params = blocks.restack(params)
  return family, config, params


from zoo.convert.export import to_hf  # pylint: disable=wrong-import-position
