"""Checks every scheme's tests share: init loss, finite gradients, overfit.

Kept tiny so the whole family trains in seconds on a laptop CPU: one small
synthetic batch, the family's `tiny` size, one jitted Adam step.
"""

import collections
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import objectives
from objectives import common
from data.synthetic import SyntheticLoader
from configs.compare import family as family_lib
from zoo import models
from zoo import sharding
from zoo import train_lib
from zoo.models import static
from zoo.plan import hlo

VOCAB = 512
SPECIALS = objectives.Specials(vocab_size=VOCAB)


def package_schemes() -> list[str]:
  """The schemes the package registers (no aliases; tests register toy
  ones of their own, which a test process may have imported first)."""
  registry = objectives._REGISTRY  # pylint: disable=protected-access
  return [n for n in objectives.names() if n not in objectives.aliases()
          and registry[n].__module__.startswith("objectives.")]


def corpus_options(name, family, size="tiny", vocab=VOCAB, **model_args):
  """What a word2vec scheme reads of a corpus, made up: every piece
  counted once, and a FastText model's n-gram ids of made-up pieces."""
  out = {}
  if objectives.takes(name, "counts"):
    out["counts"] = np.ones(vocab, np.int64)
  config = models.make_config(family, size, vocab_size=vocab, **model_args)
  if getattr(config, "ngram_buckets", 0) > 0:
    out["ngram_table"] = static.ngram_table(
        [f"piece{i}" for i in range(vocab)], config)
  return out


def tiny_batch(seq_len=48, batch_size=4, seed=0):
  """A fixed synthetic batch of the contract, int32 jnp arrays."""
  b = next(SyntheticLoader(seq_len=seq_len, batch_size=batch_size,
                           seed=seed, vocab_size=VOCAB))
  return {k: jnp.asarray(v) for k, v in b.items()}


def speech_batch(seq_len=48, batch_size=4, seed=0, n_mels=80):
  """A fixed speech batch (`data.batch.SPEECH_KEYS`): random frames, one
  utterance of random length per row (the first row full)."""
  rng = np.random.default_rng(seed)
  lengths = rng.integers(seq_len // 2, seq_len + 1, batch_size)
  lengths[0] = seq_len
  real = np.arange(seq_len)[None] < lengths[:, None]
  feats = rng.standard_normal((batch_size, seq_len, n_mels)) * real[..., None]
  return {"features": jnp.asarray(feats, jnp.float32),
          "doc_ids": jnp.asarray(real, jnp.int32),
          "phone_ids": jnp.asarray(real * rng.integers(1, 9, real.shape),
                                   jnp.int32),
          "voice_ids": jnp.asarray(real * 2, jnp.int32)}


def batch_for(family, seq_len=48, batch_size=4, seed=0):
  """The batch a family reads: speech for an acoustic model, else
  `tiny_batch`."""
  if models.get(family).INTERFACE == "acoustic":
    return speech_batch(seq_len, batch_size, seed)
  return tiny_batch(seq_len, batch_size, seed)


def build(name, model, **options):
  """The scheme bound to the family's tiny size, dropout off (and a
  made-up corpus for the word2vec schemes, `corpus_options`)."""
  args = dict(options.pop("model_args", {}))
  fields = common.config_fields(model)
  defaults = dict.fromkeys(("dropout_rate", "attention_dropout_rate",
                            "hidden_dropout", "input_dropout",
                            "embed_dropout", "weight_drop"), 0.0)
  defaults["num_layers"] = 1  # compile time dominates these tests
  for field, value in defaults.items():
    if field in fields:
      args.setdefault(field, value)
  options = dict(corpus_options(name, model, "tiny", VOCAB, **args),
                 **options)
  return objectives.build(name, model, "tiny", SPECIALS, model_args=args,
                          **options)


def sweep_family(name: str) -> str:
  """The family a per-scheme sweep builds `name` on: BERT for a scheme
  that reads a teacher, else the scheme's own."""
  if name in family_lib.TEACHER_SCHEMES:
    return "bert"
  return family_lib.family_of(name)


def data_parallel_collectives(obj) -> set[str]:
  """The collectives of `obj`'s gradient step compiled on a mesh that
  shards a batch's rows over every device (one row each)."""
  mesh = sharding.make_mesh({"data": -1})
  batch = batch_for(obj.family, seq_len=32, batch_size=len(jax.devices()))
  params = obj.init(jax.random.key(0), batch)
  rows = jax.tree.map(
      lambda x: NamedSharding(mesh, P("data", *[None] * (np.ndim(x) - 1))),
      batch)
  step = jax.jit(lambda p, b: train_lib.accumulated_grads(
      obj, p, b, jax.random.key(3), 1, mesh, sharding.DEFAULT_RULES),
                 in_shardings=(None, rows))
  with sharding.activate(mesh, sharding.DEFAULT_RULES):
    compiled = step.lower(params, batch).compile()
  return set(hlo.collectives(compiled.as_text()))


def build_for_sweep(name):
  """`name` on `sweep_family(name)`; a scheme that reads a teacher gets
  what it reads before `warm_start`: a random BERT-tiny's family and
  config, dropout off, no params."""
  options = {}
  if name in family_lib.TEACHER_SCHEMES:
    config = models.make_config("bert", "tiny", vocab_size=VOCAB,
                                dropout_rate=0.0, attention_dropout_rate=0.0)
    options["teacher"] = collections.namedtuple(
        "Teacher", "family config params")("bert", config, None)
  return build(name, sweep_family(name), **options)


def logit_variance(obj) -> float:
  """Variance of a scheme's logits at init: about 0 under N(0, 0.02)
  kernels; 1 for a T5 under Mesh TF's scales (an RMS-normed state of unit
  scale through an untied N(0, 1/D) head)."""
  c = obj.config
  if obj.family == "t5" and c.init == "mesh_tf" and not c.tie_embeddings:
    return 1.0
  return 0.0


def assert_near_uniform(loss, tolerance=0.6, vocab=VOCAB, variance=0.0):
  """Token loss at init is about log(V) + variance / 2 (the mean
  logsumexp of V logits drawn N(0, variance)): the model starts
  uninformed."""
  want = math.log(vocab) + variance / 2
  assert abs(loss - want) < tolerance, (loss, want)


def train(obj, batch, steps=30, lr=1e-2, rng=jax.random.key(1)):
  """Adam on one batch with one fixed rng (so one fixed corruption).

  Returns:
    dict: `first` loss (at init), `metrics` at init (floats), `last` (the
    best of the last three losses), `finite` (every gradient finite).
  """
  params = common.nn.meta.unbox(jax.jit(obj.init)(jax.random.key(0), batch))
  tx = optax.adam(lr)
  state = tx.init(params)

  @jax.jit
  def step(p, s):
    (loss, metrics), g = jax.value_and_grad(obj.loss, has_aux=True)(
        p, batch, rng, True)
    finite = jnp.all(jnp.stack([jnp.isfinite(x).all()
                                for x in jax.tree.leaves(g)]))
    u, s = tx.update(g, s, p)
    return optax.apply_updates(p, u), s, loss, metrics, finite

  losses, ok, first_metrics = [], True, None
  for _ in range(steps):
    params, state, loss, metrics, finite = step(params, state)
    losses.append(float(loss))
    first_metrics = first_metrics or jax.tree.map(float, metrics)
    ok &= bool(finite)
  assert np.isfinite(losses).all(), losses
  return {"first": losses[0], "metrics": first_metrics,
          "last": min(losses[-3:]), "finite": ok}


def check(obj, batch, steps=30, lr=1e-2, uniform=True):
  """The shared checks; returns `train`'s dict for scheme-specific ones.

  Loss at init near log(V) (when `uniform`), finite gradients, and the loss
  at least halves on a fixed batch.
  """
  out = train(obj, batch, steps, lr)
  if uniform:
    assert_near_uniform(out["first"], variance=logit_variance(obj))
  assert out["finite"], "non-finite gradient"
  assert out["last"] < 0.5 * out["first"], (out["first"], out["last"])
  return out


def full_logits_sums(obj, params, batch, rng, deterministic=False):
  """MLM sums of `obj.loss` recomputed from logits at every position.

  The reference for schemes whose head runs only at gathered positions
  (`logits_at`): the same corruption, dropout and params, the head over
  all T positions, and the loss weighted by the noise mask.

  Args:
    obj: a scheme with the `mlm.gather_predictions` inputs.
    params: unboxed params.
    batch: the contract dict.
    rng: the key `obj.loss` gets.
    deterministic: as for `obj.loss`.

  Returns:
    `common.token_sums` of the full [B, T, V] logits (float32 scalars).
  """
  k_noise, k_drop, _ = jax.random.split(rng, 3)
  inputs = obj.corrupt(common.as_batch(batch), k_noise)
  args, kw = obj.model_inputs(inputs)
  kw = {k: v for k, v in kw.items() if k != "logits_at"}
  out = obj.apply(params, *args, rng=k_drop, deterministic=deterministic,
                  **kw)
  return common.token_sums(out["logits"], inputs["tokens"], inputs["mask"])


def assert_gathered_loss_matches(obj, batch, part="", rng=jax.random.key(3)):
  """`obj.loss`'s MLM sums equal `full_logits_sums` to float rounding."""
  params = common.nn.meta.unbox(jax.jit(obj.init)(jax.random.key(0), batch))
  _, got = jax.jit(obj.loss)(params, batch, rng)
  want = jax.jit(full_logits_sums, static_argnums=0)(obj, params, batch, rng)
  assert float(want["weight_sum"]) > 0
  for key in ("loss_sum", "weight_sum", "correct_sum"):
    np.testing.assert_allclose(float(got[part + key]), float(want[key]),
                               rtol=2e-6, err_msg=key)


def docs_of(stream, r=None, key="tokens"):
  """{segment id: its pieces, in order} of row r of a re-packed stream
  (`segment_ids` and `key` arrays), or of `stream` itself as one row."""
  row = stream if r is None else {k: stream[k][r] for k in
                                  ("segment_ids", key)}
  tok, seg = np.asarray(row[key]), np.asarray(row["segment_ids"])
  return {d: list(tok[seg == d]) for d in np.unique(seg) if d > 0}


def assert_params_map_onto_mesh(name, model):
  """The scheme's params (model and heads) shard onto a data x fsdp x
  tensor mesh of the 8 faked devices by their logical axis names."""
  from zoo import sharding  # pylint: disable=import-outside-toplevel
  obj = build(name, model)
  abstract = jax.eval_shape(obj.init, jax.random.key(0),
                            tiny_batch(seq_len=32, batch_size=2))
  mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  sharding.logical_shardings(abstract, mesh, sharding.DEFAULT_RULES)
