"""Task examples to fixed-shape arrays (host side, numpy).

Host side only (numpy). Every split becomes a dict of arrays with a leading
example axis N and a fixed length, so one jitted step serves every batch.

Encoder rows (heads): `[cls] text [sep]`, pairs `[cls] a [sep] b [sep]`
with token types 0/1, tags `[cls] pieces [sep]` with each word's tag on its
first piece (-1 elsewhere), span QA `[cls] question [sep] context [sep]`
with the answer's first/last piece and a mask of the context positions.

Text-to-text rows: encoder-decoders get `inputs eos` and `targets eos`
(decoder inputs shifted right from the start id); decoders get
`inputs [sep] targets eos` for training and left-padded `inputs [sep]`
prompts for generation.

Letters: N examples, T length, S encoder length, P prompt length.
"""

import dataclasses

import numpy as np

from data import annotate
from zoo import models
from data.tasks import encode as task_encode


# The arrays an encoder's head step reads (the rest are targets).
INPUT_KEYS = ("tokens", "token_types", "sentence_ids", "answer_mask")


def input_keys(arrays: dict) -> list[str]:
  """The `INPUT_KEYS` that `arrays` has."""
  return [k for k in INPUT_KEYS if k in arrays]


@dataclasses.dataclass(frozen=True)
class Ids:
  """The special ids rows are built with (from `tokenizer.specials()`)."""
  pad: int
  eos: int
  cls: int
  sep: int

  @classmethod
  def of(cls, tokenizer) -> "Ids":
    """The ids of a zoo tokenizer."""
    s = tokenizer.specials()
    return cls(pad=s["pad"], eos=s["eos"], cls=s["cls"], sep=s["sep"])


def _fill(rows: list[list[int]], length: int, value: int) -> np.ndarray:
  """int32 [N,length]: rows right-padded (already no longer than length)."""
  out = np.full((len(rows), length), value, np.int32)
  for i, row in enumerate(rows):
    out[i, :len(row)] = row
  return out


def _truncate_pair(a: list[int], b: list[int], room: int):
  """Cuts the longer of a and b until len(a) + len(b) <= room."""
  a, b = list(a), list(b)
  while len(a) + len(b) > room:
    (a if len(a) >= len(b) else b).pop()
  return a, b


def _pieces(tokenizer, texts: list[str], sentences: bool):
  """Per text, (ids, sentence numbers): the whole text encoded at once,
  every piece in sentence 1, or with `sentences` sentence by sentence as
  the sample is (`data.annotate.annotate`)."""
  if not sentences:
    return [(a, [1] * len(a)) for a in tokenizer.encode_batch(texts)]
  out = []
  for text in texts:
    ann = annotate.annotate(tokenizer, text)
    out.append((ann["tokens"].tolist(), ann["sentence_ids"].tolist()))
  return out


def _sentence_rows(kind: str, examples, tokenizer, ids: Ids, max_len: int,
                   sentences: bool = False):
  """tokens, token_types, sentence_ids int32 [N,T] of class/regression/pair
  examples ([cls] opens the first sentence, each [sep] closes the one
  before it; a pair's second text numbers on from the first's)."""
  first = _pieces(tokenizer, [ex["text"] if "text" in ex else ex["inputs"]
                              for ex in examples], sentences)
  second = _pieces(tokenizer, [ex["text_b"] for ex in examples],
                   sentences) if kind == "pair" else [([], [])] * len(first)
  toks, types, sents = [], [], []
  for (a, sa), (b, sb) in zip(first, second):
    room = max_len - (3 if kind == "pair" else 2)
    a, b = _truncate_pair(a, b, room)
    sa = sa[:len(a)] or [1]
    sb = [sa[-1] + s for s in sb[:len(b)]]
    toks.append([ids.cls] + a + [ids.sep] + (b + [ids.sep] if b or
                                             kind == "pair" else []))
    types.append([0] * (len(a) + 2) + [1] * (len(toks[-1]) - len(a) - 2))
    sents.append([1] + sa + [sa[-1]] + (sb + [sb[-1] if sb else sa[-1] + 1]
                                        if kind == "pair" else []))
  return (_fill(toks, max_len, ids.pad), _fill(types, max_len, 0),
          _fill(sents, max_len, 0))


def word_pieces(tokenizer, words: list[str]):
  """`(ids, first)`: the pieces of a sentence and, per word, the index of
  its first piece in `ids` (-1 for a word that encodes to no piece)."""
  ids, first = [], []
  for pieces in tokenizer.encode_batch(list(words)):
    first.append(len(ids) if pieces else -1)
    ids += pieces
  return ids, first


def _tag_rows(examples, tokenizer, ids: Ids, max_len: int) -> dict:
  """tokens, tags [N,T] (-1 ignored) and word_pos [N,W] (-1: no piece kept).

  Positions count the leading [cls]; words past the window get -1, so
  they score as wrong rather than vanish from the metric.
  """
  toks, tags, positions = [], [], []
  for ex in examples:
    pieces, first = word_pieces(tokenizer, ex["words"])
    pieces = pieces[:max_len - 2]
    row_tags = [-1] * (len(pieces) + 2)
    pos = []
    for f, tag in zip(first, ex["tags"]):
      keep = 0 <= f < len(pieces)
      pos.append(f + 1 if keep else -1)
      if keep:
        row_tags[f + 1] = tag
    toks.append([ids.cls] + pieces + [ids.sep])
    tags.append(row_tags)
    positions.append(pos)
  width = max(1, max(len(p) for p in positions))
  return {"tokens": _fill(toks, max_len, ids.pad),
          "tags": _fill(tags, max_len, -1),
          "word_pos": _fill(positions, width, -1)}


def _span_rows(examples, tokenizer, ids: Ids, max_len: int,
               max_question: int = 32) -> dict:
  """tokens, answer_mask [N,T]; start, end [N] (-1: answer cut off)."""
  toks, masks, starts, ends = [], [], [], []
  for ex in examples:
    question = tokenizer.encode(ex["question"])[:max_question]
    begin = ex["answer_start"]
    context, (first, last) = task_encode.answer_span(
        tokenizer, ex["context"], begin, begin + len(ex["answer"]))
    context = context[:max_len - len(question) - 3]
    offset = len(question) + 2
    toks.append([ids.cls] + question + [ids.sep] + context + [ids.sep])
    masks.append([0] * offset + [1] * len(context))
    inside = last < len(context)
    starts.append(offset + first if inside else -1)
    ends.append(offset + last if inside else -1)
  return {"tokens": _fill(toks, max_len, ids.pad),
          "answer_mask": _fill(masks, max_len, 0).astype(bool),
          "start": np.asarray(starts, np.int32),
          "end": np.asarray(ends, np.int32)}


def encoder_arrays(kind: str, examples: list[dict], tokenizer,
                   max_len: int, sentences: bool = False
                   ) -> dict[str, np.ndarray]:
  """Arrays an encoder with a head trains and predicts on.

  Args:
    kind: a task kind other than "seq2seq".
    examples: task examples (raw; ids are computed here).
    tokenizer: a zoo tokenizer.
    max_len: T.
    sentences: class, pair and regression texts are read sentence by
      sentence (`zoo.models.reads_sentences`): adds "sentence_ids".

  Returns:
    "tokens" int32 [N,T], "token_types" int32 [N,T] (class/pair/regression),
    "sentence_ids" int32 [N,T] (with `sentences`: 1, 2, ...; 0 on padding),
    and per kind: "label" int32 [N] (class, pair) or float32 [N]
    (regression); "tags" int32 [N,T] and "word_pos" [N,W] (tags); "start",
    "end" int32 [N] and "answer_mask" bool [N,T] (span).
  """
  ids = Ids.of(tokenizer)
  if kind in ("class", "pair", "regression"):
    tokens, types, sents = _sentence_rows(kind, examples, tokenizer, ids,
                                          max_len, sentences)
    dtype = np.float32 if kind == "regression" else np.int32
    out = {"tokens": tokens, "token_types": types,
           "label": np.asarray([ex["label"] for ex in examples], dtype)}
    return dict(out, sentence_ids=sents) if sentences else out
  if kind == "tags":
    return _tag_rows(examples, tokenizer, ids, max_len)
  if kind == "span":
    return _span_rows(examples, tokenizer, ids, max_len)
  raise ValueError(f"task kind {kind!r} has no encoder head; encoders take "
                   "class, pair, regression, tags or span tasks")


def encdec_arrays(examples: list[dict], tokenizer, *, inputs_len: int,
                  targets_len: int, start_id: int) -> dict[str, np.ndarray]:
  """Teacher-forcing arrays of an encoder-decoder.

  Returns:
    "enc_tokens" int32 [N,S], "dec_tokens" int32 [N,T] (targets shifted
    right after `start_id`), "targets" int32 [N,T], "weights" float32 [N,T].
  """
  ids = Ids.of(tokenizer)
  enc = [x[:inputs_len - 1] + [ids.eos] for x in
         tokenizer.encode_batch([ex["inputs"] for ex in examples])]
  tgt = [y[:targets_len - 1] + [ids.eos] for y in
         tokenizer.encode_batch([ex["targets"] for ex in examples])]
  targets = _fill(tgt, targets_len, ids.pad)
  dec = _fill([[start_id] + y[:-1] for y in tgt], targets_len, ids.pad)
  weights = _fill([[1] * len(y) for y in tgt], targets_len, 0)
  return {"enc_tokens": _fill(enc, inputs_len, ids.pad), "dec_tokens": dec,
          "targets": targets, "weights": weights.astype(np.float32)}


def _prompts(examples, tokenizer, ids: Ids, prompt_len: int):
  """Each example's `inputs [sep]`, at most prompt_len ids."""
  return [x[:prompt_len - 1] + [ids.sep] for x in
          tokenizer.encode_batch([ex["inputs"] for ex in examples])]


def decoder_arrays(examples: list[dict], tokenizer, *, prompt_len: int,
                   targets_len: int) -> dict[str, np.ndarray]:
  """Next-token arrays of a decoder conditioned on `inputs [sep]`.

  Returns:
    "tokens" int32 [N,P+T] (`inputs [sep] targets eos`, right-padded),
    "segment_ids" int32 [N,P+T] (1 on real ids), "targets" int32 [N,P+T]
    (the next id), "weights" float32 [N,P+T] (1 where the next id is a
    target piece or the closing eos), "prompt" int32 [N,P] (left-padded
    `inputs [sep]`, for generation), "target_pos" int32 [N,T] (the
    positions whose next id is a target piece or eos, then padding ones,
    all < P+T: the only positions the loss needs logits at).
  """
  ids = Ids.of(tokenizer)
  prompts = _prompts(examples, tokenizer, ids, prompt_len)
  tgt = [y[:targets_len - 1] + [ids.eos] for y in
         tokenizer.encode_batch([ex["targets"] for ex in examples])]
  length = prompt_len + targets_len
  rows = [p + y for p, y in zip(prompts, tgt)]
  nxt = [r[1:] for r in rows]
  weights = [[0] * (len(p) - 1) + [1] * len(y) for p, y in zip(prompts, tgt)]
  left = np.full((len(prompts), prompt_len), ids.pad, np.int32)
  for i, p in enumerate(prompts):
    left[i, prompt_len - len(p):] = p
  return {"tokens": _fill(rows, length, ids.pad),
          "segment_ids": _fill([[1] * len(r) for r in rows], length, 0),
          "targets": _fill(nxt, length, ids.pad),
          "weights": _fill(weights, length, 0).astype(np.float32),
          "prompt": left,
          "target_pos": np.asarray([len(p) - 1 + np.arange(targets_len)
                                    for p in prompts], np.int32).reshape(
                                        len(prompts), targets_len)}


def shared_prompt_arrays(examples: list[dict], labels: list[str], tokenizer,
                         *, prompt_len: int,
                         targets_len: int) -> dict[str, np.ndarray]:
  """One row per example for scoring every label string after one copy of
  its prompt (`zoo.finetune.rank`): `inputs [sep]`, then one block of W =
  L - 1 slots per label holding its pieces (all but the closing eos, which
  is only a target), each block's positions continuing from the prompt's
  end, as in the label's own `decoder_arrays` row. L is the longest
  label's `targets eos` (at most T), so a row holds no slot that no
  label fills.

  Args:
    examples, tokenizer: as `decoder_arrays`.
    labels: the C label strings.
    prompt_len, targets_len: P and T of `decoder_arrays`.

  Returns:
    "tokens", "segment_ids" (1 on real ids), "positions", "blocks" (0 on
    the prompt, c + 1 on label c's block) int32 [N, P + C W];
    "logits_at" int32 [N, C L] (label c's L positions: the prompt's last,
    then its block's slots), "targets" int32 [N, C, L] (`targets eos`)
    and "weights" float32 [N, C, L] (1 on them).
  """
  ids = Ids.of(tokenizer)
  tgt = [y[:targets_len - 1] + [ids.eos] for y in tokenizer.encode_batch(
      labels)]
  prompts = _prompts(examples, tokenizer, ids, prompt_len)
  n, c, span = len(prompts), len(tgt), max(map(len, tgt))
  tail = _label_blocks(tgt, span - 1, ids.pad)
  ends = np.asarray([len(p) for p in prompts], np.int32)[:, None]  # [N, 1]
  head = {"tokens": _fill(prompts, prompt_len, ids.pad),
          "segment_ids": _fill([[1] * len(p) for p in prompts], prompt_len,
                               0),
          "blocks": np.zeros((n, prompt_len), np.int32)}
  head["positions"] = head["segment_ids"] * np.arange(prompt_len)
  tail["positions"] = (ends + tail.pop("offset")) * tail["segment_ids"]
  out = {k: np.concatenate([v, np.broadcast_to(tail[k], (n, c * (span - 1)))],
                           1).astype(np.int32) for k, v in head.items()}
  slots = prompt_len + np.arange(c * (span - 1)).reshape(c, span - 1)
  at = np.concatenate([np.broadcast_to(ends[:, :, None] - 1, (n, c, 1)),
                       np.broadcast_to(slots, (n, c, span - 1))], 2)
  out["logits_at"] = at.reshape(n, c * span).astype(np.int32)
  out["targets"] = np.broadcast_to(_fill(tgt, span, ids.pad),
                                   (n, c, span)).copy()
  out["weights"] = np.broadcast_to(
      _fill([[1] * len(y) for y in tgt], span, 0),
      (n, c, span)).astype(np.float32)
  return out


def _label_blocks(tgt: list[list[int]], width: int, pad: int) -> dict:
  """The label blocks that end every row of `shared_prompt_arrays`, each
  label's `targets eos` less its eos in `width` slots: int32 [C W]
  "tokens", "segment_ids" (1 on pieces), "blocks" (c + 1 on label c's)
  and "offset" (a slot's distance from its block's start)."""
  return {"tokens": _fill([y[:-1] for y in tgt], width, pad).reshape(-1),
          "segment_ids": _fill([[1] * (len(y) - 1) for y in tgt], width,
                               0).reshape(-1),
          "blocks": np.repeat(np.arange(1, len(tgt) + 1, dtype=np.int32),
                              width),
          "offset": np.tile(np.arange(width, dtype=np.int32), len(tgt))}


def chunks(arrays: dict, keys, batch_size: int):
  """Fixed-size batches over all rows; the last is padded with row 0."""
  n = len(arrays[keys[0]])
  for start in range(0, n, batch_size):
    rows = np.arange(start, start + batch_size)
    rows = np.where(rows < n, rows, 0)
    yield min(batch_size, n - start), {k: arrays[k][rows] for k in keys}


def split_arrays(spec, examples: list[dict], tokenizer,
                 lengths: dict) -> dict[str, np.ndarray]:
  """The arrays of a split for the backbone of `spec` (a `Spec`).

  `lengths`: {"inputs": T (or S, or P+T of decoders), "targets": T of
  text-to-text targets}.
  """
  if spec.interface == "encdec":
    return encdec_arrays(
        examples, tokenizer, inputs_len=lengths["inputs"],
        targets_len=lengths["targets"],
        start_id=getattr(spec.config, "decoder_start_id", spec.config.pad_id))
  if spec.interface == "decoder":
    return decoder_arrays(
        examples, tokenizer, prompt_len=lengths["inputs"] - lengths["targets"],
        targets_len=lengths["targets"])
  return encoder_arrays(spec.kind, examples, tokenizer, lengths["inputs"],
                        models.reads_sentences(spec.family, spec.config))
