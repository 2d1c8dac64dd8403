"""Model families of the zoo: what a model is, with nothing of the runtime.

Every family lives in one file, `zoo/models/<family>.py`, with the same face:

- `Config`: a frozen dataclass; one comment per field. Every config has
  `vocab_size`, `dtype` (compute dtype name, params stay float32) and
  `pad_id`.
- `SIZES`: `{"tiny": {...}, "small": {...}, "base": {...}, "large": {...}}`,
  keyword overrides of `Config` (only the sizes the papers define).
- `Model`: a linen Module with one field, `config`, whose `__call__` returns
  a dict of named outputs (`hidden`, `layers`, `logits`, ...). Params carry
  logical axis names (`vocab`, `embed`, `heads`, `kv`, `mlp`, `layers`, ...)
  through `nn.with_logical_partitioning`.
- `INTERFACE`: one of `"encoder"`, `"decoder"`, `"encdec"`, `"lstm"`,
  `"acoustic"` (frames in, frames out: Mockingjay).

`get(family)` returns that module; `make(family, size, **overrides)` returns
`(config, module_instance)`.
"""

import dataclasses
import importlib
from types import ModuleType

# Family name -> module path. Aliases share a file (RoBERTa is BERT's file).
FAMILIES = {
    "bert": "zoo.models.bert",
    "roberta": "zoo.models.bert",
    "gpt2": "zoo.models.gpt2",
    "t5": "zoo.models.t5",
    "bart": "zoo.models.bart",
    "albert": "zoo.models.albert",
    "electra": "zoo.models.electra",
    "distilbert": "zoo.models.distilbert",
    "unilm": "zoo.models.unilm",
    "elmo": "zoo.models.elmo",
    "xlnet": "zoo.models.xlnet",
    "transfo_xl": "zoo.models.transfo_xl",
    "longformer": "zoo.models.longformer",
    "reformer": "zoo.models.reformer",
    "mobilebert": "zoo.models.mobilebert",
    "awd_lstm": "zoo.models.awd_lstm",
    "skip_thought": "zoo.models.skip_thought",
    "cove": "zoo.models.cove",
    "ernie": "zoo.models.ernie",
    "word2vec": "zoo.models.static",
    "fasttext": "zoo.models.static",
    "mockingjay": "zoo.models.mockingjay",
}


def families() -> list[str]:
  """Names of the model families, in `FAMILIES` order."""
  return list(FAMILIES)


def get(family: str) -> ModuleType:
  """The module of a family (`Config`, `SIZES`, `Model`, `INTERFACE`)."""
  if family not in FAMILIES:
    raise ValueError(
        f"unknown model family {family!r}; known: {sorted(FAMILIES)}")
  return importlib.import_module(FAMILIES[family])


def interface_of(family: str, config) -> str:
  """"encoder", "decoder", "encdec" or "lstm": the family's `INTERFACE`, or
  what its `interface(config)` says (T5 may be encoder-only)."""
  mod = get(family)
  if hasattr(mod, "interface"):
    return mod.interface(config)
  return mod.INTERFACE


def reads_token_types(family: str, config) -> bool:
  """Whether the family's Model reads `token_types` (a pair's A/B ids):
  through a type table (`type_vocab_size` > 1), or as relative segment
  encodings (a family module's `TOKEN_TYPES = True`: XLNet)."""
  return bool(getattr(get(family), "TOKEN_TYPES", False)
              or getattr(config, "type_vocab_size", 0) > 1)


def reads_sentences(family: str, config=None) -> bool:
  """Whether the family reads a text sentence by sentence (a family
  module's `READS_SENTENCES = True`: Skip-Thought's encoder, unless its
  config's `sentence_reading` is off): its callers split texts as the
  sample does (`data.annotate.annotate`) and pass the sentence numbers as
  `segment_ids`."""
  return bool(getattr(get(family), "READS_SENTENCES", False)
              and getattr(config, "sentence_reading", True))


def takes_attention_mask(family: str) -> bool:
  """Whether the family's Model takes an extra attention `mask` [B, T, T]
  (AND-ed with its own) and explicit `positions` (a family module's
  `ATTENTION_MASK = True`): a decoder that does scores every label string
  after one copy of a prompt (`zoo.finetune.rank`)."""
  return bool(getattr(get(family), "ATTENTION_MASK", False))


# Stacks this deep run their layers as one scan unless `scan_layers` is
# set: one layer's program to compile instead of L (an unrolled 24-layer
# step compiles for minutes), the same params stacked on a `layers` axis.
SCAN_FROM_LAYERS = 12
# Sizes that default to no dropout on attention probabilities, as recent
# large-model recipes do (T5 1.1, PaLM): fused attention kernels (splash on
# TPU, cuDNN) take no dropout, and at this scale it buys little. Set
# `attention_dropout_rate` to keep the paper's 0.1.
NO_ATTENTION_DROPOUT = ("large",)
# Families whose layers cannot scan: their layers differ from one another.
NEVER_SCANNED = ("elmo", "awd_lstm", "cove")


def make_config(family: str, size: str = "tiny", **overrides):
  """The `Config` of `family` at a named size, with field overrides.

  Stacks of `SCAN_FROM_LAYERS` or more layers scan them unless the
  overrides set `scan_layers`; sizes in `NO_ATTENTION_DROPOUT` have no
  attention dropout unless the overrides set `attention_dropout_rate`.
  """
  mod = get(family)
  sizes = getattr(mod, "SIZES", {})
  if size not in sizes:
    raise ValueError(
        f"family {family!r} has no size {size!r}; sizes: {sorted(sizes)}")
  fields = {f.name for f in dataclasses.fields(mod.Config)}
  unknown = sorted(set(overrides) - fields)
  if unknown:
    raise ValueError(
        f"unknown {family} config fields {unknown}; fields: {sorted(fields)}")
  kwargs = dict(sizes[size])
  family_defaults = getattr(mod, "FAMILY_DEFAULTS", {}).get(family, {})
  kwargs.update(family_defaults)
  if size in NO_ATTENTION_DROPOUT and "attention_dropout_rate" in fields:
    kwargs["attention_dropout_rate"] = 0.0
  kwargs.update(overrides)
  config = mod.Config(**kwargs)
  if ("scan_layers" in fields and "scan_layers" not in overrides
      and family not in NEVER_SCANNED + ("albert",)  # ALBERT's: shared
      and getattr(config, "num_layers", 0) >= SCAN_FROM_LAYERS):
    config = dataclasses.replace(config, scan_layers=True)
  return config


def make(family: str, size: str = "tiny", **overrides):
  """`(config, model)` for a family at a named size."""
  config = make_config(family, size, **overrides)
  return config, get(family).Model(config)


# Compiler options of the programs that draw a fresh init (run once per
# model, so their compile is most of their cost): without backend
# optimisation XLA:CPU compiles them 1.7-2.6x faster (the tiny demo
# models), and a draw differs from an optimised program's by at most a
# rounding. Every init program of one model uses them, so its draws agree.
INIT_COMPILER_OPTIONS = {"xla_backend_optimization_level": 0,
                         "xla_llvm_disable_expensive_passes": True}


def init_params(family: str, config, rng, length: int = 8,
                heads: bool = True):
  """Fresh (unboxed) params of a family's `Model`, traced on one row.

  Args:
    family: model family name.
    config: its `Config`.
    rng: the init key.
    length: ids in the traced row (params do not depend on it).
    heads: False leaves out an encoder's pre-training heads (MLM, NSP),
      which fine-tuning neither builds nor trains.

  Returns:
    The params pytree `Model(config).init(...)["params"]` holds.
  """
  import flax.linen as nn  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  face = interface_of(family, config)
  row = jnp.full((1, length), min(7, config.vocab_size - 1), jnp.int32)
  args = (row, row) if face == "encdec" else (row,)
  kw = {"return_logits": False} if face == "encoder" and not heads else {}
  return nn.meta.unbox(get(family).Model(config).init(rng, *args, **kw)[
      "params"])
