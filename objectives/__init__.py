"""Pre-training schemes: each one corruption plus one loss, inside jit.

A scheme is a class in `objectives/<module>.py` registered under its own
`name` with `@register`; `build(name, model, size, specials, **options)`
returns it bound to a model:

    obj = objectives.build("mlm", model="bert", size="tiny",
                           specials=tokenizer.specials())
    params = obj.init(rng, batch)                 # boxed, logical axes
    loss, metrics = obj(params, batch, rng)       # = obj.loss(...)

`options` are the scheme's own (rates, lengths, ...; unknown names are an
error) plus `model_args`, a dict of the family's Config overrides. Params
are `{"model": <family params>, <head>: ...}`; `loss` takes them boxed or
unboxed; `backbone(params)` returns `(family, config, params)` of the
network fine-tuning starts from. Shared pieces live in `noise` (masks),
`permutation` (XLNet's factorisation orders and two-stream masks),
`transforms` (what a mask does to the text), `segments` (pairs, prefix
splits), `common` (the `Scheme` skeleton, losses) and `encdec` (noise,
inputs and targets functions combined into an encoder-decoder scheme, as
T5's preprocessors do).

`batch` follows the pretraining batch contract of DESIGN.md (int32
`[B, L]` arrays `tokens`, `doc_ids`, `sentence_ids`, `word_ids`,
`phrase_ids`). `metrics` holds sums (`loss_sum`, `weight_sum`,
`correct_sum`, ...) that aggregate across microbatches and devices; `loss`
is the scalar the optimizer differentiates (a mean). Everything random
comes from `rng` inside jit, with static shapes.
"""

import abc
import dataclasses
import importlib
import pkgutil
from typing import Any

_REGISTRY: dict[str, type] = {}
# Modules of shared pieces, not schemes: never imported by `names()`.
_HELPERS = ("noise", "transforms", "segments", "common", "encdec",
            "permutation", "memory", "fields")
# Other names of a scheme: `t5` is the T5 paper's choice, span corruption.
ALIASES = {"t5": "t5_span"}
_LOADED = False


@dataclasses.dataclass(frozen=True)
class Specials:
  """Ids of the special tokens every scheme may need.

  T5 layout: sentinel i is `sentinel0 - i` (the top of the vocabulary down).
  """
  vocab_size: int
  pad: int = 0
  eos: int = 1
  unk: int = 2
  mask: int = 3
  cls: int = 4
  sep: int = 5
  bos: int = 6
  sentinel0: int = -1  # -1: vocab_size - 1
  num_sentinels: int = 100

  def sentinel(self, i):
    """Id of sentinel i (int or int array)."""
    top = self.vocab_size - 1 if self.sentinel0 < 0 else self.sentinel0
    return top - i

  @property
  def first_regular(self) -> int:
    """Smallest id that is an ordinary piece (for random replacement)."""
    return max(self.pad, self.eos, self.unk, self.mask, self.cls, self.sep,
               self.bos) + 1

  @property
  def last_regular(self) -> int:
    """Largest id that is an ordinary piece (below the sentinels)."""
    return self.sentinel(self.num_sentinels - 1) - 1


class Objective(abc.ABC):
  """A bound scheme: models, corruption and loss. Subclasses set these."""
  name: str = ""
  interface: str = ""  # "encoder" | "decoder" | "encdec" | "pair" | "lstm"
  # Top-level params keys the optimizer never updates (a distillation
  # teacher): their updates are zero and they hold no optimizer state.
  frozen: tuple[str, ...] = ()

  @abc.abstractmethod
  def init(self, rng, batch: dict[str, Any]):
    """Params (logically boxed) for a batch of the contract's shapes."""

  @abc.abstractmethod
  def loss(self, params, batch, rng, deterministic: bool = False):
    """`(loss, metrics)`: scalar mean loss and a dict of sums."""

  @abc.abstractmethod
  def backbone(self, params):
    """`(family, config, params)` of the network fine-tuning starts from."""

  def heads(self, params) -> dict[str, Any]:
    """The scheme's own trained heads beside the backbone, name -> params
    (ERNIE's dEA head and entity table); none by default."""
    del params
    return {}

  def __call__(self, params, batch, rng, deterministic: bool = False):
    """`(loss, metrics)`: the same as `loss`."""
    return self.loss(params, batch, rng, deterministic)

  def warm_start(self, params):
    """The params a fresh run starts from, given its fresh init.

    Args:
      params: the unboxed init (the tree of `init`, sharded jax Arrays).

    Returns:
      The same tree: `params` itself by default. A scheme that starts from
      trained weights (a teacher, a student cut from it) returns host or
      device arrays of the same shapes; the trainer places them with the
      init's shardings. Runs once, on the host, never on a resumed run.
    """
    return params

  def init_carry(self, batch_size: int, seq_len: int):
    """What the scheme carries from one train step to the next, or None.

    A scheme that carries something (a Transformer-XL's segment memory,
    `objectives.memory`) returns its start value for a global batch of
    `batch_size` rows of `seq_len` tokens, a pytree of arrays boxed with
    logical axis names; the trainer keeps it in its state (`"memory"`),
    checkpointed with the rest, and trains with `loss_carry`. The default
    carries nothing: the step is a function of params, batch and rng.
    """
    del batch_size, seq_len
    return None

  def loss_carry(self, params, batch, rng, carry, deterministic: bool = False):
    """`(loss, metrics, carry)`: `loss` reading the carry of the step
    before and returning the next one (schemes with an `init_carry`)."""
    raise NotImplementedError(f"objective {self.name!r} carries nothing "
                              "across steps (init_carry is None)")


def register(cls):
  """Class decorator: registers scheme `cls` under `cls.name`.

  `cls(model=, size=, specials=, **options)` builds the bound scheme.
  """
  name = getattr(cls, "name", "")
  if not name:
    raise ValueError(f"{cls.__name__} has no scheme name")
  if name in _REGISTRY or name in ALIASES:
    raise ValueError(f"objective {name!r} registered twice")
  _REGISTRY[name] = cls
  return cls


def _load_all():
  global _LOADED
  if _LOADED:
    return
  for info in pkgutil.iter_modules(__path__):
    if not info.name.startswith("_") and info.name not in _HELPERS:
      importlib.import_module(f"{__name__}.{info.name}")
  _LOADED = True


def names() -> list[str]:
  """Sorted names of the registered schemes and their aliases."""
  _load_all()
  return sorted([*_REGISTRY, *ALIASES])


def aliases() -> dict[str, str]:
  """Alias -> the scheme it names."""
  return dict(ALIASES)


def scoring_of(name: str) -> str | None:
  """How `zoo.scoring` reads an encoder-decoder pre-trained by scheme
  `name` (or an alias): its `scoring` (one of
  `zoo.scoring.ENCDEC_METHODS`), or None for the family's default."""
  _load_all()
  scheme = _REGISTRY.get(ALIASES.get(name, name))
  if scheme is None:
    raise ValueError(f"unknown objective {name!r}; registered: {names()}")
  return getattr(scheme, "scoring", None)


def takes(name: str, option: str) -> bool:
  """Whether scheme `name` (or an alias) has the option `option`."""
  _load_all()
  scheme = _REGISTRY.get(ALIASES.get(name, name))
  if scheme is None:
    raise ValueError(f"unknown objective {name!r}; registered: {names()}")
  return option in getattr(scheme, "defaults", {})


def model_overrides(name: str, model: str) -> dict[str, Any]:
  """The Config fields scheme `name` sets on family `model` (e.g. MLM's
  `nsp_head=False`): what its model differs in from the family's default."""
  _load_all()
  scheme = _REGISTRY.get(ALIASES.get(name, name))
  if scheme is None:
    raise ValueError(f"unknown objective {name!r}; registered: {names()}")
  overrides = getattr(scheme, "overrides_for", None)
  return dict(overrides(model)) if overrides else {}


def build(name: str, model: str, size: str, specials: Specials,
          **options) -> Objective:
  """Binds scheme `name` (or an alias) to a model family and size."""
  _load_all()
  scheme = _REGISTRY.get(ALIASES.get(name, name))
  if scheme is None:
    raise ValueError(f"unknown objective {name!r}; registered: {names()}")
  return scheme(model=model, size=size, specials=specials, **options)
