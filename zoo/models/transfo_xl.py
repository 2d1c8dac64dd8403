"""Transformer-XL: a causal LM of relative attention with segment memory.

Dai et al. 2019. Token embeddings scaled by sqrt(D) (no absolute
positions), L post-LN layers as in the paper's release (`pre_lnorm=False`:
attention, then a ReLU MLP; each followed by dropout, the residual and a
LayerNorm; no final norm), and an LM head tied to the token table plus a
bias. The paper's adaptive input and adaptive softmax (vocabulary
clusters of shrinking width) are left out: one full softmax over V, as
every other family here.

Attention is `zoo.models.relative`'s (content and position terms, biases
u and v per layer) over [mems; segment] keys. Query i sees every one of
the M mems and the keys j <= i of its own document (`segment_ids`), never
padding; so with `mems=None` this is a plain causal LM, which the `clm`
scheme trains unchanged. `mems` are each layer's input states of the
previous segment ("new_mems" of the call before), read-only: no gradient
flows into them, whether given or returned.

A segment read after its predecessor's "new_mems" gives the states one
call over both segments gives at its positions, as long as the memory
holds the whole past (mem_len >= the tokens before the segment): the
states of a layer's input at earlier positions never depend on later
ones, and distances are the same (tests/test_models_transfo_xl.py).

Letters: B batch, T length, M mems, S = M + T keys, R = S + 1 relative
distances (S + T under a `prefix`), D embed, N heads, H head dim, F mlp, V
vocab, L layers.
"""

import dataclasses
from typing import Sequence

import flax.linen as nn
import jax

from zoo.models import bert
from zoo.models import layers
from zoo.models import masks
from zoo.models import relative

Array = jax.Array
INTERFACE = "decoder"


@dataclasses.dataclass(frozen=True)
class Config:
  """Transformer-XL hyper-parameters (field names shared with the other
  families)."""
  vocab_size: int = 32000  # V (the paper's WikiText-103 has 267k words)
  pad_id: int = 0  # padding id; -1 = none (every token is real)
  dtype: str = "float32"  # compute dtype of matmuls; params stay float32
  dropout_rate: float = 0.1  # embeddings, codes, sub-layers, MLP hidden
  attention_dropout_rate: float = 0.0  # on attention probabilities
  scan_layers: bool = False  # one nn.scan over the layers
  remat: str = "none"  # backward recomputation: blocks.REMAT (or a bool)
  adapter_dim: int = 0  # >0: bottleneck adapters in every layer
  num_layers: int = 16  # L
  embed_dim: int = 410  # D (even: the sinusoidal codes)
  num_heads: int = 10  # N
  head_dim: int = 41  # H
  mlp_dim: int = 2100  # F
  activation: str = "relu"  # MLP activation
  norm_eps: float = 1e-5  # LayerNorm epsilon
  mem_len: int = 150  # new_mems keep the last mem_len states; 0 = all
  clamp_len: int = -1  # distances clamped to clamp_len; <= 0: no clamp
  attention_impl: str = "auto"  # see layers.attention

  def __post_init__(self):
    if self.embed_dim % 2:
      raise ValueError(f"transfo_xl embed_dim {self.embed_dim} must be even "
                       "(sine and cosine halves of the relative codes)")


SIZES = {
    "tiny": dict(vocab_size=512, num_layers=2, embed_dim=64, num_heads=4,
                 head_dim=16, mlp_dim=128, mem_len=64),
    "base": dict(),  # the paper's WikiText-103 base, full softmax
}


def attention_mask(segments: Array, num_mems: int, mask: Array | None = None,
                   prefix: Array | None = None,
                   mem_mask: Array | None = None) -> Array:
  """bool [B, T, S], True = may attend: every mem (or those `mem_mask`
  allows), and the real keys of the query's document up to it (or its
  whole prefix, where `prefix` is given).

  Args:
    segments: [B, T] int document ids, 0 = padding.
    num_mems: M.
    mask: [B|1, T, T] bool extra mask, AND-ed in.
    prefix: [B, T] bool, each document's prefix (`masks.prefix_lm_mask`).
    mem_mask: [B, T, M] bool, the mems each query may see; None = all.
  """
  order = (masks.causal_mask(segments.shape[1]) if prefix is None
           else masks.prefix_lm_mask(prefix))
  own = masks.document_mask(segments, masks.combine_masks(mask, order))
  return relative.with_mems(own, num_mems, mem_mask)


class Model(nn.Module):
  """Transformer-XL with its tied LM head.

  Attributes:
    config: a `Config`.
  """
  config: Config

  def setup(self):
    c = self.config
    self.token = layers.Embed(c.vocab_size, c.embed_dim, dtype=c.dtype)
    self.dropout = layers.Dropout(c.dropout_rate)
    self.decoder = relative.Stack(c)
    self.lm_head = relative.LmHead(c.vocab_size)

  def __call__(self, tokens: Array, *, segment_ids: Array | None = None,
               positions: Array | None = None, mask: Array | None = None,
               prefix: Array | None = None,
               mems: Sequence[Array] | None = None,
               mem_mask: Array | None = None,
               deterministic: bool = True, return_logits: bool = True,
               logits_at: Array | None = None) -> dict:
    """Runs the decoder over one segment.

    Args:
      tokens: [B, T] int32.
      segment_ids: [B, T] int32, 0 = padding; attention stays within equal
        ids (mems excepted). None = (tokens != pad_id).
      positions: [B, T] int32; distances become pos_i - pos_j, clipped to
        the codes' 0 .. S (positions restarting per document give the same
        states as None). None = arange(T).
      mask: [B|1, T, T] bool, True = may attend, AND-ed in.
      prefix: [B, T] bool, each document's prefix, seen both ways (a
        prefix LM, as gpt2's); None = causal everywhere.
      mems: L x [B, M, D] float32, an earlier call's "new_mems".
      mem_mask: [B, T, M] bool, the mems each query may see (a training
        memory that is still empty, or of another document); None = all.
      deterministic: no dropout when True.
      return_logits: compute "logits".
      logits_at: [B, K] int32 positions: logits there only ([B, K, V]).

    Returns:
      "hidden" [B, T, D] (the last layer's output), "layers" L+1 x
      [B, T, D] (the scaled embeddings first), "new_mems" L x [B, M', D]
      (each layer's input after the mems, the last mem_len, gradient-
      stopped: `relative.cache_states`), "logits" [B, T, V] or [B, K, V]
      (if return_logits); all float32.
    """
    c = self.config
    m = relative.check_mems(mems, c, tokens.shape[0])
    if mems is not None:  # read-only, even when the caller's carry grads
      mems = [jax.lax.stop_gradient(x) for x in mems]
    ctx = self._context(tokens, segment_ids, positions, mask, prefix, m,
                        mem_mask, deterministic)
    h = self.dropout(self.token(tokens) * c.embed_dim ** 0.5,
                     deterministic=deterministic)
    hs, _ = self.decoder(h, None, mems, ctx, deterministic)
    out = {"hidden": hs[-1], "layers": (h,) + hs,
           "new_mems": relative.cache_states((h,) + hs[:-1], mems,
                                             c.mem_len)}
    if return_logits:
      last = bert.gather_positions(hs[-1], logits_at)
      out["logits"] = self.lm_head(
          self.dropout(last, deterministic=deterministic), self.token)
    return out

  def _context(self, tokens, segment_ids, positions, mask, prefix,
               num_mems, mem_mask, deterministic) -> relative.Context:
    """The mask and relative codes every layer reads."""
    c = self.config
    t = tokens.shape[1]
    segments = masks.real_segments(tokens, c.pad_id, segment_ids)
    # A prefix sees later keys: it needs the codes of negative distances.
    codes = self.dropout(
        relative.relative_codes(t, num_mems + t, c.embed_dim, c.clamp_len,
                                causal=prefix is None),
        deterministic=deterministic)
    return relative.Context(
        codes=codes,
        rel_index=(None if positions is None else relative.relative_index(
            positions, num_mems, codes.shape[0])),
        content_mask=attention_mask(segments, num_mems, mask, prefix,
                                    mem_mask))
