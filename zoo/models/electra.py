"""ELECTRA: a discriminator spotting replaced tokens, and a small generator.

Clark et al. 2020. Both networks are BERT encoders over one shared
embedding layer (token, position and token-type tables of width E, then a
per-network dense E -> D when E != D). The generator (width
`generator_fraction` x D) has an MLM head tied to the shared token table;
the discriminator scores every token as original or replaced.

`Model` is one network (`config.role`); `Pair` holds both, for
pre-training, with methods `generator` and `discriminator`.

Shapes use the letters of `zoo.models.layers` (B, T, D, V, L), E the
embedding width.
"""

import dataclasses

import flax.linen as nn
import jax

from zoo.models import bert
from zoo.models import blocks
from zoo.models import layers

Array = jax.Array
INTERFACE = "encoder"


@dataclasses.dataclass(frozen=True)
class Config(bert.Config):
  """BERT's fields (see `bert.Config`) plus ELECTRA's."""
  embedding_dim: int = 768  # E: width of the shared embedding tables
  role: str = "discriminator"  # which network `Model` is: or "generator"
  generator_fraction: float = 1 / 3  # generator width / discriminator width
  pooler: bool = False  # ELECTRA has no pooler
  nsp_head: bool = False  # nor a sentence head

  def generator(self) -> "Config":
    """The generator's Config: D, N and F scaled by generator_fraction."""
    f = self.generator_fraction
    heads = max(1, round(self.num_heads * f))
    return dataclasses.replace(
        self, role="generator", embed_dim=int(self.embed_dim * f),
        num_heads=heads, mlp_dim=int(self.mlp_dim * f))


SIZES = {
    "tiny": dict(vocab_size=512, num_layers=2, embed_dim=64, num_heads=4,
                 mlp_dim=128, max_len=128, embedding_dim=32,
                 generator_fraction=0.5),  # 2 generator heads: tensor=2 fits
    "small": dict(num_layers=12, embed_dim=256, num_heads=4, mlp_dim=1024,
                  embedding_dim=128, generator_fraction=0.25),
    "base": dict(),
    "large": dict(num_layers=24, embed_dim=1024, num_heads=16, mlp_dim=4096,
                  embedding_dim=1024, generator_fraction=0.25),
}


def embeddings(c: Config, name: str | None = None) -> bert.Embeddings:
  """The shared embedding layer (width E) of a config."""
  return bert.Embeddings(c.vocab_size, c.embedding_dim, c.max_len,
                         c.type_vocab_size, c.norm_eps, c.dropout_rate,
                         c.dtype, name=name)


class Network(nn.Module):
  """One ELECTRA encoder over given embeddings, with its role's head.

  Attributes:
    config: a `Config`; `role` picks the head.
  """
  config: Config

  @nn.compact
  def __call__(self, x: Array, embed: bert.Embeddings, mask: Array,
               deterministic: bool, return_logits: bool,
               logits_at: Array | None = None) -> dict[str, Array]:
    """x [B, T, E] embeddings, mask [B, T, T] -> the encoder dict.

    logits_at [B, K] int32 runs the role's head at those positions only
    ("logits" [B, K, V] or [B, K]); None = every position.
    """
    c = self.config
    if c.role not in ("discriminator", "generator"):
      raise ValueError(f"ELECTRA role must be 'discriminator' or "
                       f"'generator', got {c.role!r}")
    if c.embedding_dim != c.embed_dim:
      x = layers.Dense(c.embed_dim, ("embed", "embed_out"), dtype=c.dtype,
                       name="embed_proj")(x)
    h, hs = blocks.Stack(c.block(), c.num_layers, scan=c.scan_layers,
                         remat=c.remat, name="encoder")(
                             x, mask, deterministic=deterministic)
    out = {"hidden": h, "layers": (x,) + hs}
    h = bert.gather_positions(h, logits_at)
    if return_logits and c.role == "generator":
      out["logits"] = bert.MlmHead(c.embedding_dim, "gelu", c.norm_eps,
                                   c.dtype, name="mlm")(h, embed)
    elif return_logits:
      d = layers.Dense(c.embed_dim, ("embed", "embed_out"), dtype=c.dtype,
                       name="transform")(h)
      d = layers.activation_fn(c.activation)(d)
      out["logits"] = layers.Dense(1, ("embed", "classes"), dtype=c.dtype,
                                   name="score")(d)[..., 0]
    return out


def _inputs(c: Config, tokens, segment_ids, positions, mask):
  attn_mask = bert.encoder_mask(tokens, c.pad_id, segment_ids, mask)
  return attn_mask, layers.arange_positions(tokens, positions)


class Model(nn.Module):
  """One ELECTRA network (discriminator or generator, by `config.role`).

  Attributes:
    config: a `Config`.
  """
  config: Config

  def setup(self):
    self.embeddings = embeddings(self.config)
    self.body = Network(self.config)

  def __call__(self, tokens: Array, *, segment_ids: Array | None = None,
               token_types: Array | None = None,
               positions: Array | None = None, mask: Array | None = None,
               deterministic: bool = True, return_logits: bool = True,
               logits_at: Array | None = None) -> dict[str, Array]:
    """Encodes tokens; arguments as `bert.Model.__call__`.

    Returns:
      "hidden" [B, T, D], "layers" L+1 x [B, T, D] (projected embeddings
      first), and "logits": [B, T] replaced-token scores (discriminator) or
      [B, T, V] MLM logits (generator); K for T at `logits_at`.
    """
    attn_mask, pos = _inputs(self.config, tokens, segment_ids, positions,
                             mask)
    x = self.embeddings(tokens, pos, token_types, deterministic)
    return self.body(x, self.embeddings, attn_mask, deterministic,
                     return_logits, logits_at)


class Pair(nn.Module):
  """Generator and discriminator sharing one embedding layer.

  `Pair(config).init(rng, tokens)` creates both networks' params; call
  `apply(..., method="generator")` or `method="discriminator"` after.

  Attributes:
    config: the discriminator's `Config`; the generator's is derived.
  """
  config: Config

  def setup(self):
    c = dataclasses.replace(self.config, role="discriminator")
    self.embeddings = embeddings(c)
    self.generator_body = Network(c.generator())
    self.discriminator_body = Network(c)

  def _run(self, body, tokens, segment_ids, token_types, positions, mask,
           deterministic, return_logits, logits_at=None):
    attn_mask, pos = _inputs(self.config, tokens, segment_ids, positions,
                             mask)
    x = self.embeddings(tokens, pos, token_types, deterministic)
    return body(x, self.embeddings, attn_mask, deterministic, return_logits,
                logits_at)

  def generator(self, tokens: Array, *, segment_ids=None, token_types=None,
                positions=None, mask=None, deterministic: bool = True,
                return_logits: bool = True,
                logits_at: Array | None = None) -> dict[str, Array]:
    """The generator on tokens [B, T]; "logits" [B, T, V] (or [B, K, V])."""
    return self._run(self.generator_body, tokens, segment_ids, token_types,
                     positions, mask, deterministic, return_logits,
                     logits_at)

  def discriminator(self, tokens: Array, *, segment_ids=None,
                    token_types=None, positions=None, mask=None,
                    deterministic: bool = True,
                    return_logits: bool = True) -> dict[str, Array]:
    """The discriminator on tokens [B, T]; "logits" [B, T] scores."""
    return self._run(self.discriminator_body, tokens, segment_ids,
                     token_types, positions, mask, deterministic,
                     return_logits)

  def __call__(self, tokens: Array, **kw) -> tuple[dict, dict]:
    """Both networks on the same tokens (used by init)."""
    return self.generator(tokens, **kw), self.discriminator(tokens, **kw)
