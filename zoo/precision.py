"""The precision policy: which compute dtype a run's matmuls use.

Params, optimizer state, softmax and losses are float32 everywhere. The
compute dtype of matmuls (`model_args.dtype`) defaults by backend:

  cpu         float32 with full-precision matmuls (bf16 is slower on CPUs
              without AMX, and parity tests need f32);
  tpu, gpu    bfloat16 inputs with float32 accumulation, at the backend's
              default matmul precision (several times the f32 rate).

Setting `model_args.dtype` ("float32" or "bfloat16") overrides the policy.
"""

import jax

DEFAULTS = {"cpu": "float32", "tpu": "bfloat16", "gpu": "bfloat16",
            "cuda": "bfloat16", "rocm": "bfloat16"}


def default_dtype(platform: str | None = None) -> str:
  """The policy's compute dtype on `platform` (default: jax's backend)."""
  platform = platform or jax.default_backend()
  return DEFAULTS.get(platform, "float32")


def resolve(model_args: dict, platform: str | None = None) -> dict:
  """`model_args` with the policy's `dtype` where the config sets none.

  Args:
    model_args: a config's model overrides.
    platform: the backend the step compiles for ("cpu", "tpu", "gpu");
      default jax's.

  Returns:
    A new dict; unchanged when `dtype` is set or the policy is float32
    (every family's default).
  """
  out = dict(model_args)
  dtype = default_dtype(platform)
  if "dtype" not in out and dtype != "float32":
    out["dtype"] = dtype
  return out
