"""Entity vectors of a knowledge base, trained by TransE inside the zoo.

ERNIE (Zhang et al. 2019) reads each linked entity as a fixed TransE
vector (Bordes et al. 2013). `train_transe` fits them to the knowledge
base's triples with `objectives.transe`'s margin loss, one jitted step per
minibatch: SGD as in the paper, entity vectors renormalised to unit length
before each step, one corrupted triple per training triple. `entity_table`
is what a scheme reads: the vectors of `data.linking`'s knowledge base,
computed once and cached in the data folder (a `.npz` read without
pickle), with row 0 for "no entity". `transe_logits` asks TransE itself
for a relation's tails (the knowledge probe's reference row).

Letters: K entities, R relations, D dim, N triples.
"""

import dataclasses
import functools
import hashlib
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm import tqdm

from data import config as data_config
from data import linking
from data import wordnet
from objectives import transe


@dataclasses.dataclass(frozen=True)
class TransE:
  """TransE's hyper-parameters (the paper's WordNet setting: L1, margin 2,
  rate 0.01; its dim 20 grows to the entity width ERNIE reads)."""
  dim: int = 100  # D
  margin: float = 2.0
  norm: int = 1  # L1 or L2 distance
  lr: float = 0.01  # SGD on the summed loss of a minibatch
  epochs: int = 50  # passes over the triples
  batch_size: int = 4096  # triples per step
  seed: int = 0


# The step runs thousands of times (50 passes over WordNet's minibatches),
# so it always compiles at XLA's default backend optimisation (level 3),
# also in a process that lowers it for programs that run a few times, as
# the tests do: there the table builds about 2x faster than at level 0.
LOOP_COMPILER_OPTIONS = {"xla_backend_optimization_level": 3}


def _init(kb_sizes, c: TransE):
  """The paper's init: uniform in +-6/sqrt(D), relations normalised."""
  k_ent, k_rel = jax.random.split(jax.random.key(c.seed))
  bound = 6.0 / np.sqrt(c.dim)
  ent = jax.random.uniform(k_ent, (kb_sizes[0], c.dim), jnp.float32,
                           -bound, bound)
  rel = jax.random.uniform(k_rel, (kb_sizes[1], c.dim), jnp.float32,
                           -bound, bound)
  return {"entities": ent, "relations": transe.normalize(rel)}


def _step_fn(c: TransE, num_entities: int):
  tx = optax.sgd(c.lr)

  @functools.partial(jax.jit, compiler_options=LOOP_COMPILER_OPTIONS)
  def step(params, opt_state, triples, rng):
    params = dict(params, entities=transe.normalize(params["entities"]))
    negative = transe.corrupt(rng, triples, num_entities)
    # SGD on the minibatch's summed loss: every triple moves its vectors
    # at the paper's rate, as its per-triple updates do.
    loss, grads = jax.value_and_grad(lambda p: len(triples) * (
        transe.margin_loss(p["entities"], p["relations"], triples, negative,
                           c.margin, c.norm)))(params)
    updates, opt_state = tx.update(grads, opt_state)
    return (optax.apply_updates(params, updates), opt_state,
            loss / len(triples))
  return tx, step


def train_transe(triples: np.ndarray, num_entities: int, num_relations: int,
                 c: TransE = TransE(), progress: bool = True):
  """TransE vectors of a knowledge base.

  Args:
    triples: int32 [N, 3] (head, relation, tail).
    num_entities, num_relations: K and R.
    c: the hyper-parameters.
    progress: show a progress bar.

  Returns:
    ({"entities": float32 [K, D] unit rows, "relations": [R, D]}, the mean
    loss of each epoch).
  """
  params = _init((num_entities, num_relations), c)
  tx, step = _step_fn(c, num_entities)
  opt_state = tx.init(params)
  order = np.random.default_rng(c.seed)
  n = len(triples)
  batches = max(1, n // c.batch_size)  # whole batches: one compiled step
  losses = []
  rng = jax.random.key(c.seed + 1)
  for epoch in tqdm(range(c.epochs), desc="TransE", disable=not progress):
    perm = order.permutation(n)
    total = 0.0
    for b in range(batches):
      rows = triples[perm[b * c.batch_size:(b + 1) * c.batch_size]]
      params, opt_state, loss = step(params, opt_state, jnp.asarray(rows),
                                     jax.random.fold_in(rng, epoch * batches
                                                        + b))
      total += float(loss)
    losses.append(total / batches)
  params = dict(params, entities=transe.normalize(params["entities"]))
  return jax.device_get(params), losses


@functools.lru_cache(maxsize=4)
def transe_vectors(kb: str = "wordnet", c: TransE = TransE()
                   ) -> dict[str, np.ndarray]:
  """"table" float32 [K + 1, D]: row 0 zeros ("no entity"), row i + 1 the
  TransE vector of entity i of `data.linking.linker(kb)`'s knowledge base;
  "relations" float32 [R, D]. Trained on the knowledge base's triples but
  the knowledge probe's (`wordnet.held_out`), on first use, and cached in
  `<data_dir>/entities/`."""
  base = linking.linker(kb).kb
  triples = base.triples[~wordnet.held_out(base)]
  key = hashlib.sha256(json.dumps(
      [kb, dataclasses.asdict(c), len(base.synsets), len(triples)]
  ).encode()).hexdigest()[:12]
  path = data_config.data_dir() / "entities" / f"{kb}-transe-{key}.npz"
  if path.exists():
    with np.load(path, allow_pickle=False) as f:
      if "relations" in f:  # files written before relations were kept
        return {"table": f["table"], "relations": f["relations"]}
  params, losses = train_transe(triples, len(base.synsets),
                                len(base.relations), c)
  out = {"table": np.concatenate([np.zeros((1, c.dim), np.float32),
                                  np.asarray(params["entities"], np.float32)]),
         "relations": np.asarray(params["relations"], np.float32)}
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.with_name(f"{path.stem}.tmp{os.getpid()}.npz")
  np.savez(tmp, losses=np.asarray(losses, np.float32), **out)
  os.replace(tmp, path)
  return out


def entity_table(kb: str = "wordnet", c: TransE = TransE()) -> np.ndarray:
  """float32 [K + 1, D]: `transe_vectors`' "table", what ERNIE reads."""
  return transe_vectors(kb, c)["table"]


def transe_logits(kb: str, c: TransE, heads: np.ndarray, relation: str,
                  candidates: np.ndarray) -> np.ndarray:
  """float32 [N, C]: -d(e_h + w_r, e_c), TransE's own score of each
  candidate tail c (entity numbers [C]) for heads [N] under `relation`."""
  vectors = transe_vectors(kb, c)
  r = linking.linker(kb).kb.relations.index(relation)
  h, t = np.meshgrid(heads, candidates, indexing="ij")  # [N, C]
  triples = np.stack([h.ravel(), np.full(h.size, r), t.ravel()], axis=1)
  d = transe.distance(vectors["table"][1:], vectors["relations"],
                      jnp.asarray(triples, jnp.int32), c.norm)
  return -np.asarray(d, np.float32).reshape(h.shape)


SPECIAL = ("pad", "eos", "unk", "mask", "cls", "sep", "bos")


def entity_ids(tokenizer, tokens: np.ndarray, kb: str = "wordnet"
               ) -> np.ndarray:
  """int32 [B,T]: entity + 1 of each mention `data.linking` finds in rows of
  piece ids [B,T] (at its first piece; special pieces and padding are
  never linked), 0 elsewhere: the rows' `entity_ids` had they been linked
  when they were built."""
  specials = tokenizer.specials()
  special = [specials[k] for k in SPECIAL if k in specials]
  linker = linking.linker(kb)
  return np.stack([linker.link_pieces(tokenizer, row, special)
                   for row in np.asarray(tokens)]).astype(np.int32)


def entity_inputs(tokenizer, tokens: np.ndarray, kb: str = "wordnet",
                  dim: int = 100, table: np.ndarray | None = None
                  ) -> np.ndarray:
  """float32 [B,T,D]: the vectors of the `entity_ids` of rows of piece ids
  [B,T], zeros elsewhere: what ERNIE reads beside text that was not linked
  when it was built. The vectors are rows of `table` [K+1,D] (a model's
  own), else of the TransE `entity_table`."""
  if table is None:
    table = entity_table(kb, TransE(dim=dim))
  ids = entity_ids(tokenizer, tokens, kb)
  return np.where(ids[..., None] > 0, np.asarray(table)[ids], 0.0).astype(
      np.float32)
