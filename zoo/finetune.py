"""Fine-tuning and evaluation on the downstream tasks: one recipe for all.

    metrics = finetune("bert", config, params, data.tasks.load("trec"), tok,
                       mode="full", steps=300, batch_size=32, lr=1e-4)
    metrics["validation/accuracy"], metrics["test/accuracy"]

Encoders (BERT-like families, T5 with `encoder_only=True`, ELMo through its
layers) get a head: classes and sentence pairs, regression, per-token tags,
extractive span QA. Encoder-decoders (T5, BART) and decoders (GPT-2) learn
the task text-to-text and are scored on the targets they generate; a
decoder reads `inputs [sep]` and continues with the target, so a pre-trained
decoder serves as the generator.

Modes: "full" trains everything; "frozen" trains only the head; "adapters"
builds the backbone with bottleneck adapters (identity at the start),
loads the pre-trained params around them and trains adapters and head;
"scalar_mix" keeps the backbone frozen and lets the head read a learned
softmax-weighted mix of all its layers. Every run is AdamW with linear
warmup and decay over a fixed number of steps, on fixed-shape batches.
"""

import dataclasses
import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from zoo import finetune_data
from zoo import finetune_lib
from zoo import generate
from zoo import models
from zoo.finetune_lib import Spec

MODES = finetune_lib.MODES


@dataclasses.dataclass
class State:
  """What a run leaves besides its metrics.

  Attributes:
    spec: the static run description.
    params: {"backbone": ..., "head": ...} after training (no "head" for
      text-to-text runs).
    losses: the training loss of every step.
  """
  spec: Spec
  params: Any
  losses: list[float]


def _check(spec: Spec, tokenizer, max_len: int) -> None:
  """Rejects combinations that cannot run, naming the problem."""
  if spec.mode not in MODES:
    raise ValueError(f"unknown fine-tuning mode {spec.mode!r}; use one of "
                     f"{MODES}")
  if spec.text_to_text and spec.mode not in ("full", "adapters"):
    raise ValueError(f"{spec.family} ({spec.interface}) trains text-to-text "
                     f"without a head: mode {spec.mode!r} has nothing to "
                     "train; use 'full' or 'adapters'")
  if not spec.text_to_text and spec.kind not in finetune_lib.HEAD_KINDS:
    raise ValueError(f"{spec.family} is an {spec.interface} with heads for "
                     f"{finetune_lib.HEAD_KINDS}; task kind {spec.kind!r} "
                     "needs an encoder-decoder or a decoder")
  if spec.mode == "adapters" and spec.interface == "lstm":
    raise ValueError("elmo has no adapters (LSTMs); use mode 'full', "
                     "'frozen' or 'scalar_mix'")
  if tokenizer.vocab_size > spec.config.vocab_size:
    raise ValueError(f"tokenizer has {tokenizer.vocab_size} ids but the "
                     f"{spec.family} config only {spec.config.vocab_size}")
  table = getattr(spec.config, "max_len", None)
  if table is not None and max_len > table:
    raise ValueError(f"max_len {max_len} exceeds the {spec.family} position "
                     f"table ({table} rows)")


def _sample_arrays(spec: Spec, max_len: int) -> dict:
  """Arrays of one row, shaped as the backbone's inputs (for init)."""
  one = np.zeros((1, max_len), np.int32)
  if spec.interface == "encdec":
    return {"enc_tokens": one, "dec_tokens": one}
  if spec.interface == "decoder":
    return {"tokens": one, "segment_ids": one + 1}
  return {"tokens": one + 7, "token_types": one}


_INIT_OPTIONS = {"xla_backend_optimization_level": 0,
                 "xla_llvm_disable_expensive_passes": True}


def _fresh_backbone(spec: Spec, sample: dict, rng):
  """Fresh (unboxed) params of the backbone (traced inside `_fresh`)."""
  model = models.get(spec.family).Model(spec.config)
  keys = ("enc_tokens", "dec_tokens") if spec.interface == "encdec" else (
      "tokens",)
  args = [sample[k] for k in keys]
  # Heads read hidden states: an encoder's pre-training heads (MLM, NSP)
  # are neither built nor trained, so a backbone pre-trained without them
  # (Quick-Thought) loads too, and one with them has them dropped.
  kw = {"return_logits": False} if spec.interface == "encoder" else {}
  return nn.meta.unbox(model.init(rng, *args, **kw)["params"])


@functools.partial(jax.jit, static_argnums=(0, 1),
                   compiler_options=_INIT_OPTIONS)
def _fresh(spec: Spec, max_len: int, rng) -> dict:
  """Fresh {"backbone", "head"} params ("head" only for encoder tasks).

  Compiled once per spec and length (init's random ops compile several
  times faster without backend optimisation), then reused by every seed.
  """
  rng_backbone, rng_head = jax.random.split(rng)
  sample = _sample_arrays(spec, max_len)
  backbone = _fresh_backbone(spec, sample, rng_backbone)
  if spec.text_to_text:
    return {"backbone": backbone}
  batch = dict(sample, answer_mask=sample["tokens"] > 0)
  outputs = finetune_lib.backbone_outputs(spec, backbone, batch,
                                          deterministic=True)
  head = finetune_lib.task_head(spec).init(
      rng_head, outputs, batch["tokens"] > 0, batch["answer_mask"])
  return {"backbone": backbone, "head": nn.meta.unbox(head["params"])}


def load_backbone(fresh, given):
  """`given` params placed into the tree of `fresh` (the built backbone).

  Params under an "adapter" path that `given` lacks keep their fresh
  (identity) init; params of `given` that the built backbone does not use
  (a T5 decoder under an encoder-only config) are dropped. Any other
  missing param or any shape mismatch is an error.
  """
  flat_fresh = traverse_util.flatten_dict(fresh)
  flat_given = traverse_util.flatten_dict(nn.meta.unbox(given))
  out, missing = {}, []
  for key, value in flat_fresh.items():
    if key in flat_given:
      got = jnp.asarray(flat_given[key], jnp.float32)
      if got.shape != value.shape:
        raise ValueError(f"param {'/'.join(key)} has shape {got.shape}; the "
                         f"backbone expects {value.shape}")
      out[key] = got
    elif any("adapter" in k for k in key):
      out[key] = value
    else:
      missing.append("/".join(key))
  if missing:
    raise ValueError(f"params lack {len(missing)} backbone params, e.g. "
                     f"{missing[:3]}; were they made for another config?")
  return traverse_util.unflatten_dict(out)


def init_params(spec: Spec, backbone_params, max_len: int, rng):
  """{"backbone", "head"} params: loaded (or fresh) backbone, fresh head."""
  fresh = _fresh(spec, max_len, rng)
  if backbone_params is not None:
    fresh["backbone"] = load_backbone(fresh["backbone"], backbone_params)
  return fresh


def make_spec(family: str, config, task, *, mode: str = "full",
              steps: int = 100, lr: float = 1e-4,
              warmup_steps: int | None = None, weight_decay: float = 0.01,
              adapter_dim: int = 16, pool: str = "auto") -> Spec:
  """The `Spec` of fine-tuning `family` under `config` on `task`."""
  if mode == "adapters" and not config.adapter_dim:
    config = dataclasses.replace(config, adapter_dim=adapter_dim)
  warmup = max(1, steps // 10) if warmup_steps is None else warmup_steps
  interface = finetune_lib.interface_of(family, config)
  # Text-to-text runs have no head: without a label count in the spec,
  # every task of a family shares one compiled step.
  labels = 0 if interface in ("encdec", "decoder") else len(task.labels)
  return Spec(family, config, interface, task.kind, mode, labels, steps, lr,
              warmup, weight_decay,
              pool=finetune_lib.resolve_pool(family, pool))


def _arrays(spec: Spec, task, examples, tokenizer, lengths: dict) -> dict:
  """The arrays of a split for this backbone."""
  if spec.interface == "encdec":
    return finetune_data.encdec_arrays(
        examples, tokenizer, inputs_len=lengths["inputs"],
        targets_len=lengths["targets"],
        start_id=getattr(spec.config, "decoder_start_id", spec.config.pad_id))
  if spec.interface == "decoder":
    return finetune_data.decoder_arrays(
        examples, tokenizer, prompt_len=lengths["inputs"] - lengths["targets"],
        targets_len=lengths["targets"])
  return finetune_data.encoder_arrays(task.kind, examples, tokenizer,
                                      lengths["inputs"])


def _train_arrays(spec: Spec, task, tokenizer, lengths: dict) -> dict:
  """Train-split arrays; span rows whose answer is cut off are dropped."""
  arrays = _arrays(spec, task, task.train, tokenizer, lengths)
  if spec.kind == "span" and not spec.text_to_text:
    keep = arrays["start"] >= 0
    if not keep.any():
      raise ValueError(f"no train answer of {task.name} fits in max_len "
                       f"{lengths['inputs']}")
    arrays = {k: v[keep] for k, v in arrays.items()}
  return arrays


def _train(spec: Spec, params, arrays: dict, batch_size: int, seed: int):
  """Runs `spec.steps` train steps; returns (params, losses)."""
  keys = [k for k in arrays if k not in ("word_pos", "prompt")]
  n = len(arrays[keys[0]])
  order = np.random.default_rng(seed)
  need = spec.steps * batch_size
  index = np.concatenate([order.permutation(n)
                          for _ in range(-(-need // n))])[:need]
  opt_state = finetune_lib.init_opt_state(spec, params)
  rng = jax.random.key(seed)
  losses = []
  for step in range(spec.steps):
    rows = index[step * batch_size:(step + 1) * batch_size]
    batch = {k: arrays[k][rows] for k in keys}
    params, opt_state, loss = finetune_lib.train_step(
        spec, params, opt_state, batch, jax.random.fold_in(rng, step))
    losses.append(loss)
  return params, [float(x) for x in jax.device_get(losses)]


def _chunks(arrays: dict, keys, batch_size: int):
  """Fixed-size batches over all rows; the last is padded with row 0."""
  n = len(arrays[keys[0]])
  for start in range(0, n, batch_size):
    rows = np.arange(start, start + batch_size)
    rows = np.where(rows < n, rows, 0)
    yield min(batch_size, n - start), {k: arrays[k][rows] for k in keys}


def predict_heads(spec: Spec, params, arrays: dict, batch_size: int) -> dict:
  """Head predictions (numpy) of every row of encoder arrays."""
  keys = [k for k in ("tokens", "token_types", "answer_mask") if k in arrays]
  parts = []
  for real, batch in _chunks(arrays, keys, batch_size):
    out = jax.device_get(finetune_lib.predict_step(spec, params, batch))
    parts.append({k: v[:real] for k, v in out.items()})
  return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def generate_texts(spec: Spec, params, arrays: dict, tokenizer,
                   targets_len: int, batch_size: int,
                   beams: int = 0) -> list[str]:
  """Generated target strings of every row (greedy, or beam search)."""
  eos = tokenizer.specials()["eos"]
  key = "enc_tokens" if spec.interface == "encdec" else "prompt"
  kw = dict(family=spec.family, config=spec.config, max_len=targets_len,
            eos_id=eos)
  if spec.interface == "encdec":
    kw["start_id"] = getattr(spec.config, "decoder_start_id",
                             spec.config.pad_id)
    fn = generate.greedy_encdec
    if beams > 1:
      fn = functools.partial(generate.beam_encdec, beams=beams)
  elif beams > 1:
    raise ValueError("beam search is implemented for encoder-decoders only")
  else:
    fn = generate.greedy_decoder
  texts = []
  for real, batch in _chunks(arrays, [key], batch_size):
    ids = generate.trim(fn(params["backbone"], batch[key], **kw), eos)
    texts += [tokenizer.decode(row) for row in ids[:real]]
  return texts


def evaluate(spec: Spec, params, task, split: str, tokenizer, lengths: dict,
             *, batch_size: int, limit: int | None = None,
             beams: int = 0) -> dict[str, float]:
  """The task's metric on one split (its first `limit` examples)."""
  examples = task.splits[split][:limit]
  arrays = _arrays(spec, task, examples, tokenizer, lengths)
  if spec.text_to_text:
    texts = generate_texts(spec, params, arrays, tokenizer,
                           lengths["targets"], batch_size, beams)
    return finetune_data.text_scores(task, examples, texts)
  outputs = predict_heads(spec, params, arrays, batch_size)
  return finetune_data.head_scores(task, examples, arrays, outputs, tokenizer)


def finetune(family: str, config, params, task, tokenizer, *,
             mode: str = "full", seed: int = 0, steps: int = 100,
             batch_size: int = 16, lr: float = 1e-4, max_len: int = 128,
             max_target_len: int = 32, warmup_steps: int | None = None,
             weight_decay: float = 0.01, adapter_dim: int = 16,
             pool: str = "auto",
             splits: tuple[str, ...] = ("validation", "test"),
             eval_limit: int | None = None, beams: int = 0,
             return_state: bool = False):
  """Fine-tunes a backbone on a task and scores it.

  Args:
    family: model family name (`zoo.models.FAMILIES`).
    config: the backbone's `Config` (vocab_size >= the tokenizer's).
    params: the backbone's params (boxed or not), or None for a random
      init (the "no pre-training" baseline).
    task: a `data.tasks.Task`.
    tokenizer: the tokenizer the backbone was pre-trained with.
    mode: "full", "frozen", "adapters" or "scalar_mix" (text-to-text
      backbones: "full" or "adapters").
    seed: head init, dropout and batch order.
    steps, batch_size, lr, warmup_steps, weight_decay: the AdamW recipe
      (warmup defaults to 10% of the steps).
    max_len: T of encoder rows, S of encoder-decoder inputs, prompt plus
      target of decoder rows.
    max_target_len: cap on generated/teacher-forced target ids (with eos).
    adapter_dim: adapter bottleneck width in "adapters" mode.
    pool: sequence summary of class, pair and regression heads: "cls",
      "mean", or "auto" (cls for BERT-like encoders, mean for T5's encoder,
      ELMo and GPT-2). Without NSP the [cls] state of a briefly pre-trained
      encoder carries little, so short comparisons favour "mean".
    splits: the evaluation splits.
    eval_limit: score only the first this many examples of each split.
    beams: >1 decodes encoder-decoders with beam search.
    return_state: also return a `State`.

  Returns:
    {"<split>/<metric>": float, ..., "train/loss": mean loss of the last
    10% of steps}; with `return_state`, `(metrics, State)`.
  """
  spec = make_spec(family, config, task, mode=mode, steps=steps, lr=lr,
                   warmup_steps=warmup_steps, weight_decay=weight_decay,
                   adapter_dim=adapter_dim, pool=pool)
  _check(spec, tokenizer, max_len)
  # Targets pad to the cap (greedy decoding stops at eos anyway), so the
  # compiled train and generate steps do not depend on the task.
  lengths = {"inputs": max_len, "targets": max_target_len}
  if spec.interface == "decoder" and lengths["targets"] >= max_len - 1:
    raise ValueError(f"max_len {max_len} leaves no room for a prompt before "
                     f"{lengths['targets']} target ids (max_target_len); "
                     "raise max_len or lower max_target_len")
  state = init_params(spec, params, max_len, jax.random.key(seed))
  arrays = _train_arrays(spec, task, tokenizer, lengths)
  state, losses = _train(spec, state, arrays, batch_size, seed)
  metrics = {"train/loss": float(np.mean(losses[-max(1, steps // 10):]))}
  for split in splits:
    scores = evaluate(spec, state, task, split, tokenizer, lengths,
                      batch_size=batch_size, limit=eval_limit, beams=beams)
    metrics.update({f"{split}/{k}": v for k, v in scores.items()})
  if return_state:
    return metrics, State(spec, state, losses)
  return metrics
