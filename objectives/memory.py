"""Segment memory carried from one train step to the next (Transformer-XL).

Row b of step t + 1 continues row b of step t (`data.loader`: each global
row reads its own share of the documents in order), so the states a
Transformer-XL computed for row b at step t are the context of row b at
step t + 1: its "recurrence" (Dai et al. 2019, section 3.2). The trainer
carries them in its state as `state["memory"]`, a dict:

  mems: float32 [L, B, M, D], each layer's input states of the last M
    tokens of each row's stream (the model's "new_mems", stacked).
  valid: bool [B, M], the slots holding a real token's states. None at
    step 0: the memory starts empty, so step 0 is a memory-less step.
  open: bool [B, M], the slots of the document still open at the end of
    the last segment; it goes on as document 1 of the row.

With `reset_at_documents` a query sees only the valid slots of its own
document (the open one, for document 1 of its row, else none); without,
every valid slot, as the paper's training reads one long stream.

Letters: L layers, B batch (global), M mems, T length, D embed.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

Array = jax.Array
# Sharded like activations: rows over the batch axes; M and D whole (D's
# rule would reuse `fsdp`, which `batch` already takes).
MEMS_AXES = (None, "batch", None, None)
FLAGS_AXES = ("batch", None)


def check(family: str, config) -> None:
  """Raises ValueError unless the model can read a carried memory."""
  if family != "transfo_xl":
    raise ValueError(f"a memory carried across steps needs a Transformer-XL "
                     f"(model transfo_xl); {family!r} reads no mems")
  if config.mem_len <= 0:
    raise ValueError(f"a memory carried across steps needs mem_len > 0 "
                     f"(model_args.mem_len); it is {config.mem_len}")


def zeros(config, batch_size: int) -> dict:
  """The empty memory of `batch_size` global rows, logically boxed."""
  l, m, d = config.num_layers, config.mem_len, config.embed_dim
  flags = lambda: nn.LogicallyPartitioned(
      jnp.zeros((batch_size, m), bool), FLAGS_AXES)
  return {"mems": nn.LogicallyPartitioned(
      jnp.zeros((l, batch_size, m, d), jnp.float32), MEMS_AXES),
          "valid": flags(), "open": flags()}


def visible(memory: dict, doc_ids: Array, reset_at_documents: bool) -> Array:
  """bool [B, T, M]: the slots each query may attend (`mem_mask`).

  Args:
    memory: the carried memory (module docstring).
    doc_ids: [B, T] int32, the row's documents (1 continues the stream's
      open document, if any; 0 = padding).
    reset_at_documents: a query sees only its own document's slots.
  """
  valid = memory["valid"][:, None, :]
  if reset_at_documents:
    valid = valid & memory["open"][:, None, :] & (doc_ids == 1)[:, :, None]
  return jnp.broadcast_to(valid, doc_ids.shape + valid.shape[-1:])


def advance(memory: dict, new_mems, tokens: Array, doc_ids: Array,
            eos: int) -> dict:
  """The memory after a segment: its states appended, the last M kept.

  Args:
    memory: the memory the segment read.
    new_mems: L x [B, M, D], the model's "new_mems" of the segment (the
      memory's mems then its states, the last M).
    tokens, doc_ids: [B, T] int32, the segment.
    eos: the id closing each document.
  """
  m = memory["valid"].shape[1]
  real = doc_ids > 0
  last = doc_ids[:, -1]
  # The row's last document goes on in the next row unless EOS closed it.
  goes_on = (last > 0) & (tokens[:, -1] != eos)
  open_now = real & (doc_ids == last[:, None]) & goes_on[:, None]
  # Older open slots stay open only while that document fills the row.
  open_before = memory["open"] & (goes_on & (last == 1))[:, None]
  keep = lambda old, new: jnp.concatenate([old, new], axis=1)[:, -m:]
  return {"mems": jnp.stack(list(new_mems)),
          "valid": keep(memory["valid"], real),
          "open": keep(open_before, open_now)}
