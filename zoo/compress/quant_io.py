"""Saving and loading the int8 variables of `quant.quantize_params`.

One safetensors file (no pickle): every leaf of {"params": ...,
"quant_scales": ...} under its "/"-joined path, e.g.
`params/encoder/layer_0/mlp/wi/kernel` (int8 [D, F]) beside
`quant_scales/encoder/layer_0/mlp/wi/kernel_scale` (f32 []) and
`.../input_scale`; float params (biases, norms) stay float32. The
metadata names the format and the bit width; `load` checks that every
int8 tensor has its scales and every scale its int8 tensor.
"""

import os

import jax
import jax.numpy as jnp
import numpy as np
import safetensors
import safetensors.numpy
from flax import traverse_util

from zoo.compress import quant

FORMAT = "zoo.compress.quant/1"
COLLECTIONS = ("params", quant.SCALES)


def save(path: str | os.PathLike, variables: dict,
         config: quant.QuantConfig = quant.QuantConfig()) -> None:
  """Writes quantised `variables` ({"params", "quant_scales"}) to `path`."""
  check_quantized(variables)
  unknown = sorted(set(variables) - set(COLLECTIONS))
  if unknown:
    raise ValueError(f"only {COLLECTIONS} are saved; got also {unknown}")
  tensors = {}
  for col in COLLECTIONS:
    for key, value in traverse_util.flatten_dict(variables[col]).items():
      tensors["/".join((col,) + key)] = np.asarray(jax.device_get(value))
  safetensors.numpy.save_file(
      tensors, os.fspath(path),
      metadata={"format": FORMAT, "bits": str(config.bits)})


def load(path: str | os.PathLike) -> dict:
  """The variables `save` wrote, as jnp arrays, checked.

  Raises:
    ValueError: not this format, a key outside the two collections, an
      int8 tensor without its scales or a scale without its tensor.
  """
  with safetensors.safe_open(os.fspath(path), "numpy") as f:
    meta = f.metadata() or {}
  if meta.get("format") != FORMAT:
    raise ValueError(f"{path} is not an int8 export ({FORMAT}); its "
                     f"metadata: {meta}")
  flat = {}
  for name, value in safetensors.numpy.load_file(os.fspath(path)).items():
    col, _, rest = name.partition("/")
    if col not in COLLECTIONS or not rest:
      raise ValueError(f"{path}: unexpected tensor {name!r}")
    flat[(col,) + tuple(rest.split("/"))] = jnp.asarray(value)
  variables = traverse_util.unflatten_dict(flat)
  variables.setdefault(quant.SCALES, {})
  check_quantized(variables)
  return variables


def check_quantized(variables: dict) -> None:
  """Raises ValueError unless every int8 param has its scales (shape
  leading the param's, finite, > 0) and every scale an int8 param."""
  params = traverse_util.flatten_dict(variables.get("params", {}))
  scales = traverse_util.flatten_dict(variables.get(quant.SCALES, {}))
  for key, value in params.items():
    if value.dtype != jnp.int8:
      continue
    need = [key[-1] + "_scale"]
    if key[-1] in quant.INPUT_SCALE:
      need.append(quant.INPUT_SCALE[key[-1]])
    for name in need:
      if key[:-1] + (name,) not in scales:
        raise ValueError(f"int8 param {'/'.join(key)} has no scale "
                         f"{quant.SCALES}/{'/'.join(key[:-1] + (name,))}")
  for key, scale in scales.items():
    _check_scale(key, scale, params)


def _check_scale(key: tuple, scale, params: dict) -> None:
  where = "/".join(key)
  owner = quant.SCALE_OWNERS.get(key[-1])
  if owner is None:
    raise ValueError(f"unknown scale {where}; known: "
                     f"{sorted(quant.SCALE_OWNERS)}")
  codes = params.get(key[:-1] + (owner,))
  if codes is None or codes.dtype != jnp.int8:
    raise ValueError(f"scale {where} has no int8 param {owner!r} beside it")
  if tuple(scale.shape) != tuple(codes.shape[:scale.ndim]):
    raise ValueError(f"scale {where} {scale.shape} does not lead "
                     f"{owner} {codes.shape}")
  if not bool(jnp.all(jnp.isfinite(scale) & (scale > 0))):
    raise ValueError(f"scale {where} must be finite and > 0")
