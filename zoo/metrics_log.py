"""What a run writes while it trains: metrics.jsonl, TensorBoard, a bar.

Metrics arrive as sums (`loss_sum`, `weight_sum`, `correct_sum`, ...) and
are divided only here, when written: `x_sum` becomes `x`, divided by the
`weight_sum` of the same prefix (`gen_loss_sum` by `gen_weight_sum` when
there is one) or by `weight_sum`. Only process 0 writes.
"""

import json
import os
import sys
import time
from typing import Any

import numpy as np

# Per-step scalars the trainer adds to the objective's sums; they are
# averaged over the steps of a logging interval.
STEP_MEANS = ("step_loss", "grad_norm", "lr")


def summarize(sums: dict[str, Any]) -> dict[str, float]:
  """Logged scalars from summed metrics.

  Args:
    sums: float scalars; `steps` (how many steps were summed), the
      `STEP_MEANS`, and the objective's `*_sum` entries.

  Returns:
    Plain floats: step means, ratios of sums, the denominators, and `loss`
    (`loss_sum / weight_sum`, or the mean `step_loss` without a `loss_sum`).
  """
  sums = {k: float(np.asarray(v)) for k, v in sums.items()}
  steps = max(sums.pop("steps", 1.0), 1.0)
  out = {}
  for key, value in sums.items():
    if key in STEP_MEANS:
      out[key] = value / steps
    elif key.endswith("weight_sum"):
      out[key] = value
    elif key.endswith("_sum"):
      stem = key[:-len("_sum")]
      prefix = stem.split("_")[0]
      den = sums.get(f"{prefix}_weight_sum", sums.get("weight_sum", steps))
      out[stem] = value / max(den, 1e-9)
    else:
      out[key] = value
  # `loss` is the token-weighted mean when the objective sums one.
  out.setdefault("loss", out.get("step_loss", float("nan")))
  return out


def _summary_writer():
  """tensorboardX's SummaryWriter class, imported without torch.

  tensorboardX imports torch whenever it is installed, which costs seconds
  per process; scalars never need it, so torch is hidden for the import
  unless something already loaded it.
  """
  hide = "torch" not in sys.modules
  if hide:
    sys.modules["torch"] = None  # makes `import torch` raise ImportError
  try:
    from tensorboardX import SummaryWriter  # pylint: disable=import-outside-toplevel
  finally:
    if hide:
      del sys.modules["torch"]
  return SummaryWriter


class MetricsLog:
  """metrics.jsonl and TensorBoard events in a workdir (process 0 only)."""

  def __init__(self, workdir: str, enabled: bool = True):
    self.enabled = enabled
    self._tb = None
    self._file = None
    if not enabled:
      return
    os.makedirs(workdir, exist_ok=True)
    self._file = open(os.path.join(workdir, "metrics.jsonl"), "a",
                      encoding="utf-8")
    self._tb = _summary_writer()(os.path.join(workdir, "tensorboard"))

  def write(self, step: int, split: str, scalars: dict[str, float]) -> None:
    """Appends one line `{"step", "split", **scalars}` and TB scalars."""
    if not self.enabled:
      return
    row = {"step": int(step), "split": split, "time": time.time()}
    row.update({k: float(v) for k, v in scalars.items()})
    self._file.write(json.dumps(row) + "\n")
    self._file.flush()
    for key, value in scalars.items():
      self._tb.add_scalar(f"{split}/{key}", float(value), int(step))

  def close(self) -> None:
    """Flushes and closes both writers."""
    if self._file is not None:
      self._file.close()
      self._tb.close()
      self._file = self._tb = None


def read_metrics(workdir: str, split: str = "train") -> list[dict]:
  """The rows of `workdir/metrics.jsonl` for one split, in order."""
  path = os.path.join(workdir, "metrics.jsonl")
  with open(path, encoding="utf-8") as f:
    rows = [json.loads(line) for line in f if line.strip()]
  return [r for r in rows if r.get("split") == split]
