"""The masked acoustic model (Mockingjay, Liu et al. 2020).

`mam` reads speech batches (`data.source = "speech"`, `SPEECH_KEYS`): each
row's frames are stacked R at a time into steps (`mockingjay.stack_frames`),
about 15% of the real steps are chosen in consecutive spans of 7
(`noise.consecutive_spans`), and each span is zeroed (80%), replaced by
another span of the same utterance (10%) or left as it is (10%). The
model reconstructs every chosen step's R frames; the loss is their L1
error, averaged over the mel bins and the chosen steps.

Options: `rate` (0.15), `span` (7 steps), `zero_rate` / `random_rate`
(0.8 / 0.1) and `decide`: "span" draws zero / random / keep for each
span, the paper's reading of "the selected frames are masked to zero 80%
of the time"; "utterance" draws it once per utterance, as the released
code does.
"""

import jax
import jax.numpy as jnp

from objectives import common
from objectives import noise
from objectives import register
from zoo.models import mockingjay

DECIDE = ("span", "utterance")


def corrupt_steps(rng, steps, ids, *, rate, span, zero_rate, random_rate,
                  decide):
  """steps [B, T, W] float, ids [B, T] (a real prefix per row) -> the
  corrupted steps [B, T, W] and the chosen steps [B, T] bool."""
  b, t, _ = steps.shape
  k_spans, k_dice, k_src = jax.random.split(rng, 3)
  n = (ids > 0).sum(-1).astype(jnp.int32)
  starts, live, chosen = noise.consecutive_spans(k_spans, n, t, rate, span)
  shape = (b, 1) if decide == "utterance" else starts.shape
  dice = jnp.broadcast_to(jax.random.uniform(k_dice, shape), starts.shape)
  src = jax.random.randint(k_src, starts.shape, 0,
                           jnp.maximum(n - span + 1, 1)[:, None])
  pos = jnp.arange(t)
  inside = noise.span_cover(starts, live, span, t)
  def per_step(values):  # [B, K] -> [B, T]: each chosen step's span value
    return jnp.einsum("bkt,bk->bt", inside.astype(values.dtype), values)
  zero = per_step((dice < zero_rate).astype(jnp.float32)) > 0
  rand = per_step(((dice >= zero_rate) & (dice < zero_rate + random_rate))
                  .astype(jnp.float32)) > 0
  shift = per_step((src - starts).astype(jnp.float32)).astype(jnp.int32)
  moved = jnp.take_along_axis(steps, (pos[None] + shift)[..., None], axis=1)
  out = jnp.where(rand[..., None], moved, steps)
  return jnp.where(zero[..., None], 0.0, out), chosen


@register
class MaskedAcousticModel(common.Scheme):
  """L1 reconstruction of consecutively masked speech frames."""
  name = "mam"
  interfaces = ("acoustic",)
  defaults = {"rate": 0.15, "span": 7, "zero_rate": 0.8, "random_rate": 0.1,
              "decide": "span"}

  def setup(self):
    o = self.options
    if o["decide"] not in DECIDE:
      raise ValueError(f"mam decide {o['decide']!r} is not one of {DECIDE}")
    if not 0 < o["rate"] < 1 or int(o["span"]) < 1:
      raise ValueError(f"mam needs 0 < rate < 1 and span >= 1, got rate "
                       f"{o['rate']} and span {o['span']}")
    if o["zero_rate"] + o["random_rate"] > 1:
      raise ValueError("mam zero_rate + random_rate exceeds 1")

  def corrupt(self, batch, rng):
    """The batch with its frames corrupted; "steps" / "chosen" added."""
    o, r = self.options, self.config.downsample
    steps, ids = mockingjay.stack_frames(batch["features"],
                                         batch["doc_ids"], r)
    noisy, chosen = corrupt_steps(
        rng, steps, ids, rate=o["rate"], span=int(o["span"]),
        zero_rate=o["zero_rate"], random_rate=o["random_rate"],
        decide=o["decide"])
    b, t, _ = steps.shape
    frames = noisy.reshape(b, t * r, -1)
    return dict(batch, features=frames, doc_ids=batch["doc_ids"][:, :t * r],
                steps=steps, chosen=chosen)

  def model_inputs(self, inputs):
    return (inputs["features"],), {"doc_ids": inputs["doc_ids"]}

  def score(self, params, inputs, outputs, rng, deterministic):
    error = jnp.abs(outputs["reconstruction"] - inputs["steps"]).mean(-1)
    w = inputs["chosen"].astype(jnp.float32)
    return {"mam": {"loss_sum": (error * w).sum(), "weight_sum": w.sum()}}
