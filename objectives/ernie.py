"""ERNIE's knowledgeable pre-training (Zhang et al. 2019): MLM plus the
denoising entity auto-encoder (dEA).

The rows carry linked entities (`entity_ids`, `data.entities` set: the
config `configs/ernie_ernie.py` links WordNet's nouns). Inside jit each
token-entity alignment is, as in the paper, replaced by a random entity
(5%), masked out (15%: the token gets no entity), or kept (80%); the
tokens are masked for MLM as BERT's. The model reads each remaining
entity's fixed TransE vector (`zoo.knowledge.entity_table`, in the train
state under "entities", never trained) at its mention's first token.

dEA predicts, at every token aligned with an entity in the clean row, that
entity among the row's entities: p(e_j | w_i) = softmax_j(linear(w_i) .
e_j) over the distinct entities of the row (each counted once, at its first
mention). The loss is MLM's mean plus `dea_weight` times dEA's mean.

Letters: B batch, T length, D embed, E entity width, K entities.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from objectives import common
from objectives import mlm as mlm_lib
from objectives import register
from zoo.models import layers

ERNIE_DEFAULTS = dict(
    mlm_lib.MLM_DEFAULTS,
    kb="wordnet",            # the knowledge base of `data.linking`
    entity_replace=0.05,     # alignments given a random entity
    entity_mask=0.15,        # alignments removed
    dea_weight=1.0,          # dEA's mean loss beside MLM's
    entity_vectors="transe",  # "transe" (trained, cached) or "random"
    num_entities=0,          # K; 0: the knowledge base's count
)


def noisy_entities(rng, ids, num_entities: int, replace: float, drop: float):
  """[B,T] int32: `ids` (entity + 1, 0 = none) with each alignment replaced
  by a uniform entity at rate `replace`, removed at rate `drop`, else kept."""
  k_u, k_draw = jax.random.split(rng)
  u = jax.random.uniform(k_u, ids.shape)
  draw = jax.random.randint(k_draw, ids.shape, 1, num_entities + 1,
                            ids.dtype)
  linked = ids > 0
  out = jnp.where(linked & (u < replace), draw, ids)
  return jnp.where(linked & (u >= replace) & (u < replace + drop), 0, out)


def first_mentions(ids):
  """([B,T] bool: the first position of each distinct entity of the row,
  [B,T] int32: for each position, the first position of its entity)."""
  same = (ids[:, :, None] == ids[:, None, :]) & (ids[:, None, :] > 0)
  t = ids.shape[1]
  earlier = jnp.tril(jnp.ones((t, t), bool), -1)[None]
  first = (ids > 0) & ~jnp.any(same & earlier, axis=-1)
  return first, jnp.argmax(same, axis=-1).astype(jnp.int32)


def dea_head(config) -> layers.Dense:
  """dEA's projection of token states [..,D] into entity space [..,E]."""
  return layers.Dense(config.entity_dim, ("embed", "entity"),
                      dtype=config.dtype)


def dea_scores(head_params, config, hidden, candidates):
  """float32 [N,C]: dEA's logits of token states hidden [N,D] for the
  entity vectors candidates [C,E]."""
  queries = dea_head(config).apply({"params": head_params}, hidden)
  return jnp.einsum("ne,ce->nc", queries.astype(jnp.float32),
                    candidates.astype(jnp.float32))


def dea_sums(queries, table, ids):
  """dEA's cross-entropy sums: queries [B,T,E] against the vectors of the
  row's distinct entities (table [K+1,E], ids [B,T] entity + 1)."""
  first, target = first_mentions(ids)
  candidates = table[ids]  # [B,T,E]: each position's entity vector
  logits = jnp.einsum("bte,bse->bts", queries.astype(jnp.float32),
                      candidates.astype(jnp.float32))
  logits = jnp.where(first[:, None, :], logits, -1e9)
  return common.token_sums(logits, target, ids > 0)


@register
class Ernie(mlm_lib.MaskedLM):
  """MLM and dEA on ERNIE's knowledgeable encoder."""
  name = "ernie"
  defaults = ERNIE_DEFAULTS
  frozen = ("entities",)

  def setup(self):
    super().setup()
    if self.family != "ernie":
      raise ValueError(f"objective 'ernie' needs the ernie family (its "
                       f"entity stream); got {self.family!r}")
    if self.options["entity_vectors"] not in ("transe", "random"):
      raise ValueError(f"entity_vectors must be 'transe' or 'random'; got "
                       f"{self.options['entity_vectors']!r}")
    self.part_weights = {"mlm": 1.0, "dea": float(self.options["dea_weight"])}
    self.dea = dea_head(self.config)

  @property
  def num_entities(self) -> int:
    """K: the option, or the knowledge base's entity count."""
    if self.options["num_entities"]:
      return int(self.options["num_entities"])
    from data import linking  # pylint: disable=g-import-not-at-top
    return len(linking.linker(self.options["kb"]).kb.synsets)

  def corrupt(self, batch, rng):
    k_mlm, k_ent = jax.random.split(rng)
    inputs = super().corrupt(batch, k_mlm)
    return dict(inputs, entity_in=noisy_entities(
        k_ent, batch["entity_ids"], self.num_entities,
        self.options["entity_replace"], self.options["entity_mask"]))

  def init_heads(self, rng, params, inputs):
    k_table, k_dea = jax.random.split(rng)
    shape = (self.num_entities + 1, self.config.entity_dim)
    table = nn.with_logical_partitioning(
        nn.initializers.normal(0.1), ("entities", "entity"))(k_table, shape)
    dea = self.dea.init(k_dea, jnp.zeros((1, 1, self.config.embed_dim)))
    return {"entities": table, "dea": dea["params"]}

  def run(self, params, inputs, rng, deterministic):
    args, kw = self.model_inputs(inputs)
    table = jax.lax.stop_gradient(params["entities"])
    ids = inputs["entity_in"]
    kw = dict(kw, entities=table[ids], has_entity=ids > 0)
    return self.apply(params, *args, rng=rng, deterministic=deterministic,
                      **kw)

  def score(self, params, inputs, outputs, rng, deterministic):
    queries = self.dea.apply({"params": params["dea"]}, outputs["hidden"])
    table = jax.lax.stop_gradient(params["entities"])
    return {"mlm": mlm_lib.masked_sums(outputs["logits"], inputs),
            "dea": dea_sums(queries, table, inputs["entity_ids"])}

  def heads(self, params):
    """"dea": the dEA head's params, "entities": the [K+1,E] table."""
    p = nn.meta.unbox(params)
    return {"dea": p["dea"], "entities": p["entities"]}

  def warm_start(self, params):
    """The fresh model beside the knowledge base's TransE vectors."""
    if self.options["entity_vectors"] == "random":
      return params
    from zoo import knowledge  # pylint: disable=g-import-not-at-top
    table = knowledge.entity_table(
        self.options["kb"], knowledge.TransE(dim=self.config.entity_dim))
    if table.shape != params["entities"].shape:
      raise ValueError(f"the {self.options['kb']} TransE table is "
                       f"{table.shape}; the state holds "
                       f"{params['entities'].shape} (num_entities?)")
    return dict(params, entities=table)
