"""What a fine-tuning run is: its static `Spec`, checked before it runs.

`Spec` is hashable, so one compiled train step serves every seed and every
call with the same backbone, task kind and mode. A class or tag head is
`head_width` wide, its task's C classes rounded up to a multiple of
`LABEL_WIDTH`: the classes past C are held out of every softmax (their
output bias is `ABSENT_LOGIT`, their weights zero, and neither ever moves),
and C itself is not part of a spec's identity, so the tasks of up to 8
classes share one compiled train, predict and init program.
"""

import dataclasses
from typing import Any

from zoo import models

MODES = ("full", "frozen", "adapters", "scalar_mix")
HEAD_KINDS = ("class", "pair", "regression", "tags", "span")
TAGGERS = ("linear", "bilstm")  # tagging heads (`heads.TokenTagger` kinds)
# Class heads: "auto" = the family's own (a dense head on an encoder's
# pooled states; text-to-text for decoders and encoder-decoders), "ulmfit"
# = ULMFiT's concat-pooling classifier (`heads.ConcatPoolClassifier`) on
# any encoder's or decoder's states.
HEADS = ("auto", "ulmfit")
# Backbones whose first position is no summary token: pool by mean, or at
# the last position where the family's paper reads it there (XLNet).
_AUTO_POOL = {"t5": "mean", "elmo": "mean", "gpt2": "mean",
              "transfo_xl": "mean", "xlnet": "last"}
POOLS = ("auto", "cls", "last", "mean")
# Class and tag heads are this many outputs wide per block of classes.
LABEL_WIDTH = 8
# The output bias of a class past the task's C: exp of it underflows to
# exactly 0 in float32, so such a class takes no probability, no gradient
# and no prediction.
ABSENT_LOGIT = -1e9
_PADDED_KINDS = ("class", "pair", "tags")


def padded_width(num_labels: int) -> int:
  """C classes rounded up to a multiple of `LABEL_WIDTH` outputs."""
  return -(-num_labels // LABEL_WIDTH) * LABEL_WIDTH


def resolve_pool(family: str, pool: str) -> str:
  """"cls", "last" or "mean": `pool`, or for "auto" the family's natural
  summary (its first token where pre-training gives it one, XLNet's last,
  else the mean)."""
  if pool not in POOLS:
    raise ValueError(f"unknown pooling {pool!r}; use one of {POOLS}")
  if pool == "auto":
    return _AUTO_POOL.get(family, "cls")
  return pool


@dataclasses.dataclass(frozen=True)
class Spec:
  """Everything static about a fine-tuning run.

  Attributes:
    family: model family name.
    config: the backbone's frozen `Config` (adapters already set).
    interface: "encoder", "lstm", "encdec" or "decoder".
    kind: the task kind.
    mode: one of `MODES`.
    num_labels: C (classes or tags); 0 otherwise. Not part of the spec's
      identity (its hash and equality): compiled programs read only
      `head_width`.
    steps, lr, warmup_steps, weight_decay, clip_norm: the AdamW recipe.
    head_dropout: dropout inside the head.
    pool: how class, pair and regression heads summarise the sequence:
      "cls" (first position), "last" (last non-pad position) or "mean"
      (over non-pad positions).
    tagger: the head of tags tasks, one of `TAGGERS`: "linear" per piece,
      or "bilstm" (a BiLSTM over the states, then linear).
    soft_weight: task distillation (`zoo.finetune.distill`): the weight of
      the teacher's soft labels against the gold ones; 0 = none.
    temperature: T of the soft labels.
    quant: a `zoo.compress.quant.QuantConfig`: quantisation-aware
      fine-tuning (Q8BERT) of an encoder; None = float.
    ulmfit: a `zoo.finetune.ulmfit.Recipe`: ULMFiT's discriminative
      rates, gradual unfreezing and slanted triangular schedule; None =
      one rate for all.
    head: one of `HEADS`. A decoder with the "ulmfit" head is called as
      an encoder is (tokens in, states out: `interface` "encoder").
    head_lr: the head's learning rate over the backbone's (1: one rate).
    standardize: the head standardises its pooled features by their mean
      and std over the training examples (`heads.Standardize`), as the
      frozen probe does.
    pad_labels: class and tag heads are `head_width` wide (False: exactly
      C, for a run that prunes the head's matrices, where the padding's
      zero weights would count as pruned ones).
    head_width: the head's outputs (derived): C rounded up to a multiple
      of `LABEL_WIDTH` for class, pair and tags tasks with `pad_labels`,
      else C.
  """
  family: str
  config: Any
  interface: str
  kind: str
  mode: str = "full"
  num_labels: int = dataclasses.field(default=0, compare=False)
  steps: int = 100
  lr: float = 1e-4
  warmup_steps: int = 10
  weight_decay: float = 0.01
  clip_norm: float = 1.0
  head_dropout: float = 0.1
  pool: str = "cls"
  tagger: str = "linear"
  soft_weight: float = 0.0
  temperature: float = 1.0
  quant: Any = None
  ulmfit: Any = None
  head: str = "auto"
  head_lr: float = 1.0
  standardize: bool = False
  pad_labels: bool = True
  head_width: int = dataclasses.field(init=False)

  def __post_init__(self):
    width = self.num_labels
    if self.pad_labels and self.kind in _PADDED_KINDS and width > 0:
      width = padded_width(width)
    object.__setattr__(self, "head_width", width)

  @property
  def text_to_text(self) -> bool:
    """True for encoder-decoders and decoders (no head; they generate)."""
    return self.interface in ("encdec", "decoder")

  @property
  def num_states(self) -> int:
    """L+1, the length of the backbone's "layers" tuple."""
    return self.config.num_layers + 1


def check(spec: Spec, tokenizer, lengths: dict) -> None:
  """Rejects combinations that cannot run, naming the problem."""
  if spec.mode not in MODES:
    raise ValueError(f"unknown fine-tuning mode {spec.mode!r}; use one of "
                     f"{MODES}")
  if spec.text_to_text and spec.mode not in ("full", "adapters"):
    raise ValueError(f"{spec.family} ({spec.interface}) trains text-to-text "
                     f"without a head: mode {spec.mode!r} has nothing to "
                     "train; use 'full' or 'adapters'")
  if not spec.text_to_text and spec.kind not in HEAD_KINDS:
    raise ValueError(f"{spec.family} is an {spec.interface} with heads for "
                     f"{HEAD_KINDS}; task kind {spec.kind!r} "
                     "needs an encoder-decoder or a decoder")
  if not spec.head_lr > 0:
    raise ValueError(f"head_lr {spec.head_lr} must be positive")
  if spec.head not in HEADS:
    raise ValueError(f"unknown head {spec.head!r}; use one of {HEADS}")
  if spec.head == "ulmfit" and (spec.text_to_text
                                or spec.kind not in ("class", "pair")):
    raise ValueError(f"the ulmfit head classifies (class and pair tasks) "
                     f"from an encoder's or decoder's states; this run is a "
                     f"{spec.kind} task on {spec.family} ({spec.interface})")
  if spec.standardize and (spec.text_to_text or spec.head != "auto" or
                           spec.kind not in ("class", "pair", "regression")):
    raise ValueError(f"standardize applies to the pooled features of a "
                     f"class, pair or regression head (head 'auto'); this "
                     f"run is a {spec.kind} task on {spec.family} "
                     f"({spec.interface}, head {spec.head!r})")
  if spec.mode == "adapters" and spec.interface == "lstm":
    raise ValueError("elmo has no adapters (LSTMs); use mode 'full', "
                     "'frozen' or 'scalar_mix'")
  if tokenizer.vocab_size > spec.config.vocab_size:
    raise ValueError(f"tokenizer has {tokenizer.vocab_size} ids but the "
                     f"{spec.family} config only {spec.config.vocab_size}")
  max_len = lengths["inputs"]
  if spec.interface == "decoder" and lengths["targets"] >= max_len - 1:
    raise ValueError(f"max_len {max_len} leaves no room for a prompt before "
                     f"{lengths['targets']} target ids (max_target_len); "
                     "raise max_len or lower max_target_len")
  table = getattr(spec.config, "max_len", None)
  if table is not None and max_len > table:
    raise ValueError(f"max_len {max_len} exceeds the {spec.family} position "
                     f"table ({table} rows)")


def make_spec(family: str, config, task, *, mode: str = "full",
              steps: int = 100, lr: float = 1e-4,
              warmup_steps: int | None = None, weight_decay: float = 0.01,
              adapter_dim: int = 16, pool: str = "auto",
              tagger: str = "linear", head: str = "auto") -> Spec:
  """The `Spec` of fine-tuning `family` under `config` on `task`."""
  if mode == "adapters" and not config.adapter_dim:
    config = dataclasses.replace(config, adapter_dim=adapter_dim)
  warmup = max(1, steps // 10) if warmup_steps is None else warmup_steps
  interface = models.interface_of(family, config)
  if head == "ulmfit" and interface == "decoder":
    interface = "encoder"  # read through a head: tokens in, states out
  # Text-to-text runs have no head: without a label count in the spec,
  # every task of a family shares one compiled step.
  labels = 0 if interface in ("encdec", "decoder") else len(task.labels)
  if tagger not in TAGGERS:
    raise ValueError(f"unknown tagger {tagger!r}; one of {TAGGERS}")
  return Spec(family, config, interface, task.kind, mode, labels, steps, lr,
              warmup, weight_decay,
              pool=resolve_pool(family, pool), tagger=tagger, head=head)
