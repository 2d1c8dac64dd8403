"""Mockingjay: a masked acoustic model, a BERT over speech frames.

Liu et al. 2020. Log-mel frames [B, T, M] (`data.audio`) are downsampled
by stacking R consecutive frames into one step ([B, T/R, R*M]), projected
to D, given the Transformer's fixed sinusoidal position codes (unit
amplitude, no table: `positions="fixed"`; `"learned"` trains a table from
N(0, 0.02)), normalised, and encoded by L post-LN transformer blocks. A
prediction head (dense, activation, LayerNorm, dense) reconstructs each
step's R stacked frames: the masked acoustic model (`objectives.acoustic`)
trains it on steps whose frames it hid.

Shapes use the letters of `zoo.models.layers` (B, T, D, L); T here counts
steps of R frames, M the mel bins, and the input's frame count is R * T
(a remainder shorter than R is dropped).
"""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from zoo.models import bert
from zoo.models import blocks
from zoo.models import layers
from zoo.models import masks

Array = jax.Array
INTERFACE = "acoustic"


@dataclasses.dataclass(frozen=True)
class Config(bert.Config):
  """BERT's block fields (see `bert.Config`) plus the acoustic input's."""
  vocab_size: int = 0  # no tokens: frames in, frames out
  num_mels: int = 80  # M: width of one input frame
  downsample: int = 3  # R: frames stacked into one step
  max_len: int = 1024  # the most steps a row may have
  positions: str = "fixed"  # "fixed" sinusoidal codes (paper) or "learned"
  pooler: bool = False
  nsp_head: bool = False
  type_vocab_size: int = 0


SIZES = {
    "tiny": dict(num_layers=2, embed_dim=64, num_heads=4, mlp_dim=128,
                 max_len=256),
    # The paper's base and large: 3 and 12 layers of 768.
    "base": dict(num_layers=3),
    "large": dict(num_layers=12),
}


def stack_frames(frames: Array, doc_ids: Array, r: int
                 ) -> tuple[Array, Array]:
  """frames [B, R*T, M], doc_ids [B, R*T] -> steps [B, T, R*M] and the
  steps' ids [B, T] (a step is real when its first frame is)."""
  b, n, m = frames.shape
  t = n // r
  steps = frames[:, :t * r].reshape(b, t, r * m)
  return steps, doc_ids[:, :t * r:r]


class Model(nn.Module):
  """Acoustic encoder with a frame-reconstruction head.

  Attributes:
    config: a `Config`.
  """
  config: Config

  def setup(self):
    c = self.config
    self.project = layers.Dense(c.embed_dim, ("frames", "embed"),
                                dtype=c.dtype)
    if c.positions not in ("fixed", "learned"):
      raise ValueError(f"mockingjay positions {c.positions!r}: use 'fixed' "
                       "or 'learned'")
    if c.positions == "learned":
      self.position = layers.Embed(c.max_len, c.embed_dim,
                                   axes=("positions", "embed"))
    self.norm = layers.LayerNorm(c.norm_eps)
    self.dropout = layers.Dropout(c.dropout_rate)
    self.encoder = blocks.Stack(c.block(), c.num_layers, scan=c.scan_layers,
                                remat=c.remat)
    self.head_dense = layers.Dense(c.embed_dim, ("embed", "embed_out"),
                                   dtype=c.dtype)
    self.head_norm = layers.LayerNorm(c.norm_eps)
    self.head_out = layers.Dense(c.downsample * c.num_mels,
                                 ("embed", "frames"), dtype=c.dtype)

  def __call__(self, frames: Array, *, doc_ids: Array | None = None,
               deterministic: bool = True, return_logits: bool = True
               ) -> dict[str, Array]:
    """Encodes frames [B, R*T, M] float (`doc_ids` [B, R*T]: 0 on padding;
    default all real).

    Returns:
      "hidden" [B, T, D], "layers" L+1 x [B, T, D] (the normalised input
      first), "steps" [B, T, R*M] (the stacked input frames), "step_ids"
      [B, T] and, if return_logits, "reconstruction" [B, T, R*M]; all
      float32 but the ids.
    """
    c = self.config
    if frames.ndim != 3 or frames.shape[-1] != c.num_mels:
      raise ValueError(f"mockingjay reads frames [B, T, {c.num_mels}], got "
                       f"{frames.shape}")
    if doc_ids is None:
      doc_ids = jnp.ones(frames.shape[:2], jnp.int32)
    steps, ids = stack_frames(frames.astype(jnp.float32), doc_ids,
                              c.downsample)
    if steps.shape[1] > c.max_len:
      raise ValueError(f"{steps.shape[1]} steps exceed max_len {c.max_len}")
    pos = jnp.broadcast_to(jnp.arange(steps.shape[1]), ids.shape)
    x = self.project(steps) + (
        self.position(pos) if c.positions == "learned"
        else layers.sinusoidal(pos, c.embed_dim))
    x = self.dropout(self.norm(x), deterministic=deterministic)
    h, hs = self.encoder(x, masks.self_attention(ids),
                         deterministic=deterministic)
    out = {"hidden": h, "layers": (x,) + hs, "steps": steps,
           "step_ids": ids}
    if return_logits:
      y = layers.activation_fn(c.activation)(self.head_dense(h))
      out["reconstruction"] = self.head_out(self.head_norm(y))
    return out
