"""ELECTRA: a generator's MLM and the discriminator's replaced-token
detection on every position (Clark et al. 2020).

The generator fills the masked positions with pieces sampled from its own
distribution (inside jit, no gradient through the sample); the
discriminator, sharing the generator's embedding tables, labels every piece
of the corrupted row as original or replaced. The loss is the generator's
MLM plus 50 times the discriminator's. The discriminator is the backbone.

The generator's head runs, and samples, only at the K masked slots of
`mlm.gather_predictions`, not over all [B, T, V].
"""

import jax
import jax.numpy as jnp

from objectives import common
from objectives import mlm as mlm_lib
from objectives import register
from objectives import transforms
from zoo import models


@register
class Electra(common.Scheme):
  """Generator MLM + weighted replaced-token detection on a `Pair`."""
  name = "electra"
  interfaces = ("encoder",)
  defaults = dict(mlm_lib.MLM_DEFAULTS, mask_rate=1.0, random_rate=0.0,
                  rtd_weight=50.0, temperature=1.0)

  def setup(self):
    module = models.get(self.family)
    if not hasattr(module, "Pair"):
      raise ValueError(f"objective 'electra' needs a family with a "
                       f"generator/discriminator Pair; {self.family!r} has "
                       "none (use model='electra')")
    self.pair = module.Pair(self.config)
    self.interface = "pair"
    self.part_weights = {"mlm": 1.0, "rtd": self.options["rtd_weight"]}

  def corrupt(self, batch, rng):
    opts = {k: self.options[k] for k in mlm_lib.MLM_DEFAULTS}
    tokens, mask = mlm_lib.mask_tokens(rng, batch, self.specials, **opts)
    doc = batch["doc_ids"]
    # One sampling seed per row, drawn with the corruption: the generator's
    # samples do not depend on how rows are split into microbatches.
    seeds = jax.random.bits(jax.random.fold_in(rng, 1), (doc.shape[0],),
                            jnp.uint32)
    inputs = dict(batch, inputs=tokens, mask=mask,
                  positions=transforms.positions_from_segments(doc),
                  sample_seeds=seeds)
    return mlm_lib.gather_predictions(inputs, opts["rate"])

  def _kw(self, inputs):
    return {"segment_ids": inputs["doc_ids"],
            "positions": inputs["positions"]}

  def init_model(self, rng, inputs):
    return self.pair.init({"params": rng, "dropout": rng}, inputs["inputs"],
                          **self._kw(inputs))["params"]

  def _apply(self, params, method, tokens, inputs, rng, deterministic,
             **kw):
    rngs = {} if rng is None else {"dropout": rng}
    return self.pair.apply({"params": params["model"]}, tokens,
                           method=method, deterministic=deterministic,
                           rngs=rngs, **self._kw(inputs), **kw)

  def run(self, params, inputs, rng, deterministic):
    k_gen, k_disc = jax.random.split(rng) if rng is not None else (None,
                                                                    None)
    gen = self._apply(params, "generator", inputs["inputs"], inputs, k_gen,
                      deterministic, logits_at=inputs["logits_at"])
    logits = jax.lax.stop_gradient(gen["logits"]) / self.options["temperature"]
    row_keys = jax.vmap(jax.random.key)(inputs["sample_seeds"])
    sampled = jax.vmap(jax.random.categorical)(row_keys, logits).astype(
        jnp.int32)
    fake = transforms.scatter_rows(
        inputs["tokens"], inputs["logits_at"],
        jnp.where(inputs["weights"], sampled, inputs["targets"]), unique=True)
    disc = self._apply(params, "discriminator", fake, inputs, k_disc,
                       deterministic)
    return {"generator": gen["logits"], "scores": disc["logits"],
            "replaced": fake != inputs["tokens"]}

  def score(self, params, inputs, outputs, rng, deterministic):
    return {
        "mlm": mlm_lib.masked_sums(outputs["generator"], inputs),
        "rtd": common.binary_sums(outputs["scores"], outputs["replaced"],
                                  inputs["doc_ids"] > 0)}

  def backbone(self, params):
    """The discriminator as a standalone `electra.Model`."""
    p = common.nn.meta.unbox(params)["model"]
    disc = {"embeddings": p["embeddings"], "body": p["discriminator_body"]}
    return self.family, self.config, disc

  def generator(self, params):
    """The generator as a standalone `electra.Model` (role "generator")."""
    p = common.nn.meta.unbox(params)["model"]
    gen = {"embeddings": p["embeddings"], "body": p["generator_body"]}
    return self.family, self.config.generator(), gen
