"""Shared helpers of the Hugging Face parity tests (not a test module)."""

import jax
import numpy as np
import torch
import jax.numpy as jnp

from zoo import convert
from zoo import models

TOL = 1e-4


def save(model, folder) -> str:
  """Saves a transformers model as safetensors into `folder`."""
  model.save_pretrained(str(folder), safe_serialization=True)
  return str(folder)


def padded_ids(vocab: int, pad: int, shape=(2, 9), seed=0, low=3):
  """[B, T] int ids with the second row right-padded, and its 0/1 mask."""
  ids = np.random.RandomState(seed).randint(low, vocab, shape)
  ids[1, shape[1] - 3:] = pad
  mask = np.ones(shape, np.int64)
  mask[1, shape[1] - 3:] = 0
  return ids, mask


def run_torch(model, ids, mask, **kw):
  """The reference forward with hidden states, no grad."""
  torch.manual_seed(0)
  with torch.no_grad():
    return model.eval()(torch.tensor(ids), attention_mask=torch.tensor(mask),
                        output_hidden_states=True, **kw)


def run_zoo(folder, ids, mask, **kw):
  """from_hf, then the zoo forward with segment_ids = the HF mask."""
  family, config, params = convert.from_hf(folder)
  model = models.get(family).Model(config)
  fwd = jax.jit(lambda p, x, s: model.apply({"params": p}, x, segment_ids=s,
                                            **kw))
  out = fwd(params, jnp.asarray(ids, jnp.int32), jnp.asarray(mask, jnp.int32))
  return family, config, out


def max_diff(ours, theirs, mask) -> float:
  """Max abs difference over the real (mask == 1) positions."""
  theirs = theirs.detach().numpy() if hasattr(theirs, "detach") else theirs
  diff = np.abs(np.asarray(ours) - theirs)
  return float(diff[np.asarray(mask, bool)].max())
