"""Downstream tasks from real labelled data, text-to-text as T5 frames them.

    task = data.tasks.load("trec", tokenizer=tok)
    task.kind, task.metric, task.labels      # "class", "accuracy", [...]
    for ex in task.validation: ex["inputs"], ex["targets"], ex["label"]

Every example has `inputs` and `targets` strings; classification adds
`label` (an index into `task.labels`), regression `label` (a float), tagging
`words` and `tags` (indices into `task.labels`), extractive QA `context`,
`question`, `answer` and `answer_start` (a character offset into
`context`). With a tokenizer, examples also carry `input_ids` and
`target_ids`, tagging `token_ids` and `tag_ids` (the word's tag on its
first piece, -1 on the rest) and QA `answer_span` (first and last piece
of the answer).

Splits are deterministic: they depend only on the data, never on a seed.
Evaluation splits are kept modest (at most ~500 examples) so the harness can
fine-tune tiny models on two cores.
"""

import dataclasses
import hashlib
from typing import Callable

KINDS = ("class", "regression", "pair", "tags", "span", "seq2seq")
_REGISTRY: dict[str, Callable[[], "Task"]] = {}


@dataclasses.dataclass
class Task:
  """One downstream task.

  Attributes:
    name: registry name.
    kind: one of `KINDS`.
    metric: what to report ("accuracy", "f1", "pearson_spearman", "squad",
      "rouge").
    labels: class or tag names (empty for regression, span and seq2seq).
    splits: "train", "validation", "test" -> list of example dicts.
  """
  name: str
  kind: str
  metric: str
  labels: list[str]
  splits: dict[str, list[dict]]

  @property
  def train(self) -> list[dict]:
    """The train examples."""
    return self.splits["train"]

  @property
  def validation(self) -> list[dict]:
    """The validation examples."""
    return self.splits["validation"]

  @property
  def test(self) -> list[dict]:
    """The test examples."""
    return self.splits["test"]


def register(name: str):
  """Decorator registering a zero-argument factory of a `Task`."""
  def wrap(factory):
    if name in _REGISTRY:
      raise ValueError(f"task {name!r} registered twice")
    _REGISTRY[name] = factory
    return factory
  return wrap


def names() -> list[str]:
  """Sorted names of the tasks."""
  _load_all()
  return sorted(_REGISTRY)


def load(name: str, tokenizer=None) -> Task:
  """Task `name`, its examples encoded with `tokenizer` when one is given."""
  _load_all()
  if name not in _REGISTRY:
    raise ValueError(f"unknown task {name!r}; known: {names()}")
  task = _REGISTRY[name]()
  if tokenizer is not None:
    from data.tasks import encode  # pylint: disable=g-import-not-at-top
    encode.add_ids(task, tokenizer)
  return task


def _load_all() -> None:
  # pylint: disable=g-import-not-at-top,unused-import
  from data.tasks import classify, structured  # noqa: F401


def stable_key(text: str) -> str:
  """A hash that orders examples the same way on every machine."""
  return hashlib.sha256(text.encode("utf-8")).hexdigest()


def hash_ordered(splits: dict[str, list[dict]],
                 key: str) -> dict[str, list[dict]]:
  """Each split ordered by the hash of `key`, so that any prefix of it (an
  `eval_limit`) is a fair sample rather than one class's block."""
  return {name: sorted(rows, key=lambda ex: stable_key(ex[key]))
          for name, rows in splits.items()}


def split_fixed(examples: list[dict], key: str, n_eval: int,
                n_train: int | None = None) -> dict[str, list[dict]]:
  """Dedupes by `key`, orders by its hash, cuts test, validation, train.

  Test and validation get `n_eval` examples each, train the rest (at most
  `n_train`).
  """
  unique = {}
  for ex in examples:
    unique.setdefault(ex[key], ex)
  ordered = sorted(unique.values(), key=lambda ex: stable_key(ex[key]))
  if len(ordered) < 3 * n_eval:
    raise ValueError(f"only {len(ordered)} examples for {n_eval} per "
                     "evaluation split")
  train = ordered[2 * n_eval:]
  return {"test": ordered[:n_eval], "validation": ordered[n_eval:2 * n_eval],
          "train": train[:n_train] if n_train else train}
