"""DistilBERT: BERT's encoder with half the layers, no token types, no pooler.

Sanh et al. 2019. The network is `zoo.models.bert.Model` with
`type_vocab_size=0`, `pooler=False` and `nsp_head=False`; the student is
trained by distillation from a BERT teacher (an objective's business).

Shapes use the letters of `zoo.models.layers` (B, T, D, V, L).
"""

import dataclasses

from zoo.models import bert

INTERFACE = "encoder"


@dataclasses.dataclass(frozen=True)
class Config(bert.Config):
  """BERT's fields with DistilBERT's defaults (see `bert.Config`)."""
  num_layers: int = 6  # L: half of BERT-base
  type_vocab_size: int = 0  # no token-type table
  pooler: bool = False  # no pooler
  nsp_head: bool = False  # no sentence head


SIZES = {
    "tiny": dict(vocab_size=512, num_layers=2, embed_dim=64, num_heads=4,
                 mlp_dim=128, max_len=128),
    "base": dict(),  # the paper's only size: 6 x 768, 66M
}


class Model(bert.Model):
  """DistilBERT encoder: returns "hidden", "layers", "logits" (MLM head).

  See `bert.Model.__call__` for arguments; `token_types` is ignored.
  """
