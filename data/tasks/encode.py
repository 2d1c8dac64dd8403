"""Token ids for task examples: inputs/targets, tag alignment, answer spans."""

def tag_ids(tokenizer, words: list[str], tags: list[int]) -> tuple[list, list]:
  """`(ids, tag_ids)` of a tagged sentence: each word's tag on its first
  piece, -1 (ignored) on the rest."""
  ids, out = [], []
  for piece, tag in zip(tokenizer.encode_batch(list(words)), tags):
    ids += piece
    out += [tag] + [-1] * (len(piece) - 1)
  return ids, out


def answer_span(tokenizer, context: str, start: int, end: int):
  """`(ids, (first, last))`: the context's ids and the pieces that cover
  characters `[start, end)`, by encoding the prefix and the answer."""
  before = tokenizer.encode(context[:start])
  answer = tokenizer.encode(context[start:end])
  after = tokenizer.encode(context[end:])
  ids = before + answer + after
  return ids, (len(before), len(before) + len(answer) - 1)


def add_ids(task, tokenizer) -> None:
  """Adds `input_ids`, `target_ids` and per-kind ids to every example."""
  for examples in task.splits.values():
    for ex in examples:
      ex["input_ids"] = tokenizer.encode(ex["inputs"])
      ex["target_ids"] = tokenizer.encode(ex["targets"])
      if task.kind == "tags":
        ex["token_ids"], ex["tag_ids"] = tag_ids(tokenizer, ex["words"],
                                                ex["tags"])
      elif task.kind == "span":
        start = ex["answer_start"]
        ex["context_ids"], ex["answer_span"] = answer_span(
            tokenizer, ex["context"], start, start + len(ex["answer"]))
        ex["question_ids"] = tokenizer.encode(ex["question"])
