"""Quick-Thought: pick each sentence's true neighbours among the batch's.

Two encoders of the same family (Logeswaran & Lee 2018): `f` embeds a
sentence, `g` embeds candidates; sentence i classifies its next and its
previous sentence (same document) against every sentence of the batch by
the dot product f(s_i) . g(s_j). Sentences are encoded separately: each
attends only to itself (`segment_ids` are sentence numbers) and is
mean-pooled. `f` is the backbone fine-tuning starts from.
"""

import jax
import jax.numpy as jnp

from objectives import common
from objectives import register
from objectives import segments
from objectives import transforms


def sentence_means(hidden, sent, count):
  """Mean states of each sentence.

  Args:
    hidden: [B, L, D] float32.
    sent: [B, L] int32 sentence number 1..count, 0 elsewhere.
    count: static number S of sentence slots.

  Returns:
    ([B, S, D] float32 means, [B, S] bool slot holds a sentence).
  """
  def row(h, s):
    tot = jax.ops.segment_sum(h, s, num_segments=count + 1)[1:]
    n = jax.ops.segment_sum(jnp.ones_like(s, jnp.float32), s,
                            num_segments=count + 1)[1:]
    return tot / jnp.maximum(n, 1.0)[:, None], n > 0
  return jax.vmap(row)(hidden, sent)


def sentence_docs(doc_ids, sent, count):
  """[B, S] int32 document of each sentence slot (0 if empty)."""
  return jax.vmap(lambda d, s: jax.ops.segment_max(
      d, s, num_segments=count + 1)[1:])(doc_ids, sent).clip(0)


@register
class QuickThought(common.Scheme):
  """Contrastive neighbour prediction with two encoders."""
  name = "quick_thought"
  interfaces = ("encoder",)
  defaults = {"max_sentences": 0}  # sentence slots per row; 0: L // 4
  part_weights = {"neighbours": 1.0, "next": 0.0, "previous": 0.0}
  model_overrides = {"nsp_head": False}

  def corrupt(self, batch, rng):
    count = self.options["max_sentences"] or batch["tokens"].shape[1] // 4
    sent = segments.sentence_index(batch)
    sent = jnp.where(sent <= count, sent, 0)
    return dict(batch, sent=sent,
                sent_docs=sentence_docs(batch["doc_ids"], sent, count),
                positions=transforms.positions_from_segments(sent))

  def model_inputs(self, inputs):
    return (inputs["tokens"],), {"segment_ids": inputs["sent"],
                                 "positions": inputs["positions"],
                                 "return_logits": False}

  def init_heads(self, rng, params, inputs):
    return {"context": self.init_model(rng, inputs)}

  def run(self, params, inputs, rng, deterministic):
    args, kw = self.model_inputs(inputs)
    k_f, k_g = (None, None) if rng is None else jax.random.split(rng)
    f = self.apply(params, *args, rng=k_f, deterministic=deterministic, **kw)
    g = self.apply({"model": params["context"]}, *args, rng=k_g,
                   deterministic=deterministic, **kw)
    return {"f": f["hidden"], "g": g["hidden"]}

  def score(self, params, inputs, outputs, rng, deterministic):
    count = inputs["sent_docs"].shape[1]
    f, valid = sentence_means(outputs["f"], inputs["sent"], count)
    g, _ = sentence_means(outputs["g"], inputs["sent"], count)
    n = f.shape[0] * count
    logits = f.reshape(n, -1) @ g.reshape(n, -1).T
    valid = valid.reshape(n)
    idx = jnp.arange(n)
    logits = jnp.where(valid[None, :] & (idx[:, None] != idx[None, :]),
                       logits, -1e9)
    docs = inputs["sent_docs"]
    parts = {}
    for name, step in (("next", 1), ("previous", -1)):
      nbr = jnp.roll(docs, -step, axis=1)
      edge = count - 1 if step == 1 else 0
      ok = (docs > 0) & (nbr == docs) & (jnp.arange(count) != edge)
      parts[name] = common.token_sums(logits[None], (idx + step)[None],
                                      ok.reshape(1, n))
    both = {k: parts["next"][k] + parts["previous"][k] for k in parts["next"]}
    return {"neighbours": both, **parts}
