"""Grover (Zellers et al. 2019): a language model over an article's fields.

`grover` reads rows of articles (`data.source = "articles"`: topic,
headline and body, each in its markers, `field_ids` 1, 2, 3). Before the
loss, inside jit, every document is laid out afresh (`objectives.fields`):
some fields dropped, the rest split into context and target, context
first, each group in the canonical order. The model then learns the next
token over the whole laid-out document, so that at generation any field
can follow any others (the body from its topic and headline, a headline
from a body).

Options: `rule` ("paper": the paper's partition and dropout; "release":
the released data preparation's three cases), `drop` (0.1, each field's
dropout) and `body_only` (0.35, the share of documents that keep only
their body, or under the release start with it).
"""

import jax.numpy as jnp

from data import articles
from objectives import common
from objectives import fields
from objectives import lm
from objectives import register

_TITLE, _BODY = (articles.FIELDS.index(f) + 1 for f in ("headline", "body"))


@register
class Grover(common.Scheme):
  """Next-token prediction over randomly laid-out article fields."""
  name = "grover"
  interfaces = ("decoder",)
  defaults = {"rule": "paper", "drop": 0.1, "body_only": 0.35,
              "head_chunk": 0}

  def setup(self):
    if self.options["rule"] not in fields.RULES:
      raise ValueError(f"grover rule {self.options['rule']!r} is not one of "
                       f"{fields.RULES}")

  def corrupt(self, batch, rng):
    """The rows with every document's fields laid out (doc_ids kept)."""
    o = self.options
    group = fields.chunks(rng, batch["doc_ids"], batch["field_ids"],
                          body=_BODY, title=_TITLE,
                          num_fields=len(articles.FIELDS), rule=o["rule"],
                          drop=o["drop"], body_only=o["body_only"])
    keep, doc_ids, field_ids, tokens = fields.arrange(
        group, batch["doc_ids"], batch["field_ids"], batch["tokens"])
    return dict(batch, tokens=jnp.where(keep, tokens, 0),
                doc_ids=doc_ids, field_ids=field_ids)

  def model_inputs(self, inputs):
    return (inputs["tokens"],), lm.lm_inputs(self, inputs)

  def score(self, params, inputs, outputs, rng, deterministic):
    return lm.next_token_parts(self, params, inputs, outputs)
