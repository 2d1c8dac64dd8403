"""Recurrent building blocks: a one-direction LSTM (with ELMo's projection
and clipping), a BiLSTM and a GRU (optionally conditioned, as Skip-Thought's
decoders are), all restarting at segment boundaries so packed documents
never see each other.

Letters: B batch, T length, D projected width, C memory cells, H GRU
units, K conditioning width.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from zoo.models import dense
from zoo.models import dropout
from zoo.models import layers as layers_lib


def dot(eq: str, x, w, dtype: str):
  """einsum in the compute dtype with a float32 result."""
  return layers_lib.einsum(eq, x, w, layers_lib.compute_dtype(dtype))


def param(module, name, init, shape, axes):
  """A param of `module` carrying logical axis names `axes`."""
  return module.param(name, nn.with_logical_partitioning(init, axes), shape)


def word_table(module, vocab_size: int, embed_dim: int):
  """The [V, E] word table of a recurrent family ("token_embedding",
  uniform in +-0.1 as AWD-LSTM's), a param of `module`."""
  return param(module, "token_embedding", dense.uniform_init(0.1),
               (vocab_size, embed_dim), ("vocab", "embed"))


def segments_of(tokens, segment_ids, pad_id: int):
  """`segment_ids`, or where None one segment of each row's real tokens
  ([B,T] int32: 1 on tokens that are not `pad_id`, 0 on padding)."""
  if segment_ids is None:
    return (tokens != pad_id).astype(jnp.int32)
  return segment_ids


def segment_starts(segment_ids):
  """bool [B,T]: True where a new segment begins (state must restart)."""
  first = jnp.ones_like(segment_ids[:, :1], dtype=bool)
  return jnp.concatenate([first, segment_ids[:, 1:] != segment_ids[:, :-1]],
                         axis=1)


class LSTM(nn.Module):
  """One-direction LSTM, optionally with ELMo's projection and clipping.

  Attributes:
    cells: C memory cells.
    proj_dim: D projected state width; 0 = no projection (state width C).
    cell_clip / proj_clip: clip bounds; 0 = no clipping.
    reverse: run right to left (a backward LM).
    weight_drop: DropConnect on the state-to-state kernel (AWD-LSTM): each
      weight dropped at this rate, one mask for every step of a call.
  """
  cells: int
  proj_dim: int = 0
  cell_clip: float = 0.0
  proj_clip: float = 0.0
  reverse: bool = False
  dtype: str = "float32"
  weight_drop: float = 0.0

  @nn.compact
  def __call__(self, x, segment_ids, deterministic: bool = True):
    """x [B,T,Din] float, segment_ids [B,T] int32 -> states [B,T,D] f32;
    not `deterministic`, `weight_drop` draws from the "dropout" rng."""
    c, d = self.cells, self.proj_dim or self.cells
    init = nn.initializers.lecun_normal()
    w_in = param(self, "input_kernel", init, (x.shape[-1], 4 * c),
                  ("embed", "lstm"))
    w_state = param(self, "state_kernel", init, (d, 4 * c), ("embed", "lstm"))
    # The forget gate starts open (bias 1) so early gradients flow.
    bias = param(self, "bias", _forget_bias_init, (4 * c,), ("lstm",))
    w_proj = (param(self, "proj_kernel", init, (c, d), ("lstm", "embed"))
              if self.proj_dim else None)
    if self.weight_drop and not deterministic:
      w_state = dropout.drop(self.make_rng("dropout"), w_state,
                             self.weight_drop, w_state.shape)
    if self.reverse:
      x, segment_ids = x[:, ::-1], segment_ids[:, ::-1]
    xw = dot("btd,dg->btg", x, w_in, self.dtype) + bias
    states = self._scan(xw, segment_starts(segment_ids), w_state, w_proj)
    return states[:, ::-1] if self.reverse else states

  def _scan(self, xw, starts, w_state, w_proj):
    """Runs the recurrence over T; xw [B,T,4C], starts [B,T] bool."""
    b, c = xw.shape[0], self.cells
    d = self.proj_dim or c

    def step(carry, inputs):
      h, mem = carry
      xw_t, start_t = inputs
      keep = ~start_t[:, None]
      h, mem = jnp.where(keep, h, 0.0), jnp.where(keep, mem, 0.0)
      z = xw_t + dot("bd,dg->bg", h, w_state, self.dtype)
      i, f, g, o = jnp.split(z, 4, axis=-1)
      mem = jax.nn.sigmoid(i) * jnp.tanh(g) + jax.nn.sigmoid(f) * mem
      if self.cell_clip:
        mem = jnp.clip(mem, -self.cell_clip, self.cell_clip)
      h = jax.nn.sigmoid(o) * jnp.tanh(mem)
      if w_proj is not None:
        h = dot("bc,cd->bd", h, w_proj, self.dtype)
        if self.proj_clip:
          h = jnp.clip(h, -self.proj_clip, self.proj_clip)
      return (h, mem), h

    init = (jnp.zeros((b, d), jnp.float32), jnp.zeros((b, c), jnp.float32))
    _, hs = jax.lax.scan(step, init, (xw.swapaxes(0, 1), starts.swapaxes(0, 1)))
    return hs.swapaxes(0, 1)


def _forget_bias_init(key, shape, dtype=jnp.float32):
  del key
  c = shape[0] // 4
  return jnp.zeros(shape, dtype).at[c:2 * c].set(1.0)


class BiLSTM(nn.Module):
  """A forward and a backward LSTM over the same inputs, concatenated.

  Used by the tagging head; ELMo keeps its directions apart instead.
  """
  cells: int
  dtype: str = "float32"

  @nn.compact
  def __call__(self, x, segment_ids):
    """x [B,T,D] float, segment_ids [B,T] int32 -> [B,T,2C] float32."""
    fwd = LSTM(self.cells, dtype=self.dtype, name="forward")(x, segment_ids)
    bwd = LSTM(self.cells, reverse=True, dtype=self.dtype,
               name="backward")(x, segment_ids)
    return jnp.concatenate([fwd, bwd], axis=-1)


class GRU(nn.Module):
  """One-direction GRU (Cho et al. 2014), optionally conditioned.

  With `cond`, every gate also reads a vector per position (Skip-Thought's
  decoders: the encoded neighbour sentence, through the matrices C_r, C_z
  and C of Kiros et al. 2015, eq. 2-5):
    r = s(W_r x + U_r h + C_r c),  z = s(W_z x + U_z h + C_z c),
    h~ = tanh(W x + U (r * h) + C c),  h' = (1 - z) * h + z * h~.

  Attributes:
    units: H.
  """
  units: int
  dtype: str = "float32"

  @nn.compact
  def __call__(self, x, segment_ids, cond=None):
    """x [B,T,Din] float, segment_ids [B,T] int32, cond [B,T,K] or None ->
    states [B,T,H] float32."""
    h_dim = self.units
    init = nn.initializers.lecun_normal()
    w_in = param(self, "input_kernel", init, (x.shape[-1], 3 * h_dim),
                  ("embed", "lstm"))
    w_gates = param(self, "gate_kernel", nn.initializers.orthogonal(),
                    (h_dim, 2 * h_dim), ("embed", "lstm"))
    w_cand = param(self, "candidate_kernel", nn.initializers.orthogonal(),
                   (h_dim, h_dim), ("embed", "lstm"))
    bias = param(self, "bias", nn.initializers.zeros, (3 * h_dim,), ("lstm",))
    xw = dot("btd,dg->btg", x, w_in, self.dtype) + bias
    if cond is not None:
      w_cond = param(self, "cond_kernel", init, (cond.shape[-1], 3 * h_dim),
                     ("embed", "lstm"))
      xw = xw + dot("btk,kg->btg", cond, w_cond, self.dtype)
    starts = segment_starts(segment_ids)

    def step(h, inputs):
      xw_t, start_t = inputs
      h = jnp.where(start_t[:, None], 0.0, h)
      x_rz, x_c = xw_t[:, :2 * h_dim], xw_t[:, 2 * h_dim:]
      r, z = jnp.split(jax.nn.sigmoid(
          x_rz + dot("bh,hg->bg", h, w_gates, self.dtype)), 2, axis=-1)
      cand = jnp.tanh(x_c + dot("bh,hg->bg", r * h, w_cand, self.dtype))
      h = (1.0 - z) * h + z * cand
      return h, h

    init_h = jnp.zeros((x.shape[0], h_dim), jnp.float32)
    _, hs = jax.lax.scan(step, init_h,
                         (xw.swapaxes(0, 1), starts.swapaxes(0, 1)))
    return hs.swapaxes(0, 1)
