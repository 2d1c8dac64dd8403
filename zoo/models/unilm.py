"""UniLM: one BERT network, the attention mask chosen per example.

Dong et al. 2019. The weights are BERT's (`zoo.models.bert`, any BERT
checkpoint loads as is); each row of a batch runs in one of four modes,
built into a [B, T, T] mask by `mode_mask`:

  BIDIRECTIONAL (0)  every token sees every token (BERT's cloze task),
  LEFT_TO_RIGHT (1)  token t sees tokens <= t,
  RIGHT_TO_LEFT (2)  token t sees tokens >= t,
  SEQ2SEQ (3)        source tokens (the first `source_lengths`) see the
                     source; target tokens see the source and the target
                     to their left.

Shapes use the letters of `zoo.models.layers` (B, T, D, V, L).
"""

import dataclasses

import jax
import jax.numpy as jnp

from zoo.models import bert
from zoo.models import layers
from zoo.models import masks

Array = jax.Array
INTERFACE = "encoder"
BIDIRECTIONAL, LEFT_TO_RIGHT, RIGHT_TO_LEFT, SEQ2SEQ = (
    masks.BIDIRECTIONAL, masks.LEFT_TO_RIGHT, masks.RIGHT_TO_LEFT,
    masks.SEQ2SEQ)


@dataclasses.dataclass(frozen=True)
class Config(bert.Config):
  """BERT's fields (see `bert.Config`); UniLM uses no NSP head."""
  nsp_head: bool = False


SIZES = {
    "tiny": dict(vocab_size=512, num_layers=2, embed_dim=64, num_heads=4,
                 mlp_dim=128, max_len=128),
    "base": dict(),  # initialised from BERT-base
    "large": dict(num_layers=24, embed_dim=1024, num_heads=16, mlp_dim=4096),
}


def mode_mask(modes: Array, source_lengths: Array | None,
              length: int) -> Array:
  """The per-example UniLM attention mask (`masks.unilm_mask`).

  Args:
    modes: [B] int, one of BIDIRECTIONAL, LEFT_TO_RIGHT, RIGHT_TO_LEFT,
      SEQ2SEQ per row.
    source_lengths: [B] int, the source length of SEQ2SEQ rows (ignored
      for other modes); None = 0.
    length: T.

  Returns:
    [B, T, T] bool, True where query t may attend to key s.
  """
  if source_lengths is None:
    source_lengths = jnp.zeros(modes.shape, jnp.int32)
  return masks.unilm_mask(modes,
                          masks.prefix_from_lengths(source_lengths, length))


class Model(bert.Model):
  """BERT with per-example mask modes.

  `__call__` takes `bert.Model`'s arguments plus `modes` [B] int and
  `source_lengths` [B] int; their mask is AND-ed with `mask` and the
  segment mask. Returns `bert.Model`'s dict.
  """

  def __call__(self, tokens: Array, *, modes: Array | None = None,
               source_lengths: Array | None = None, mask: Array | None = None,
               **kw) -> dict[str, Array]:
    """tokens [B, T]; modes, source_lengths [B] -> see `bert.Model`."""
    if modes is not None:
      mask = layers.combine_masks(
          mode_mask(modes, source_lengths, tokens.shape[1]), mask)
    return super().__call__(tokens, mask=mask, **kw)
