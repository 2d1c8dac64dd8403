"""Post-training calibration of int8 quantisation (`zoo.compress.quant`):
input ranges measured on a few batches of a trained model."""

import flax.linen as nn
import jax

from zoo.compress import quant
from zoo.compress.quant import STATS, QuantConfig


def calibrate(model: nn.Module, params, batches,
              config: QuantConfig = QuantConfig(), **kwargs):
  """Post-training calibration: input ranges measured on a few batches.

  Args:
    model: the linen module.
    params: its float params.
    batches: an iterable of dicts: "tokens" [B, T] int32, the model's
      first argument, and any keyword arguments of its call
      (`segment_ids`, ...).
    config: the moving max's decay over batches (`ema_decay`; with few
      batches, about 0.9), bits and embeddings.
    **kwargs: keyword arguments of every call (`deterministic`, ...).

  Returns:
    The "quant_stats" tree (for `fake_quantized(stats=...)` and
    `quantize_params`).
  """
  def one(params, stats, batch):
    variables = {"params": params} if stats is None else {
        "params": params, STATS: stats}
    rest = {k: v for k, v in batch.items() if k != "tokens"}
    with quant.fake_quantized(config):
      _, new = model.apply(variables, batch["tokens"], mutable=[STATS],
                           **rest, **kwargs)
    return new[STATS]
  # The params are arguments, never constants the compiler would fold.
  first = jax.jit(lambda p, b: one(p, None, b))
  stats, step = None, jax.jit(one)
  for batch in batches:
    stats = first(params, batch) if stats is None else step(
        params, stats, batch)
  if stats is None:
    raise ValueError("calibration needs at least one batch")
  return stats
