#!/usr/bin/env bash
# MFU of the zoo on one GPU (H200 class), in bfloat16 with cuDNN flash
# attention: BERT-large MLM, T5-base span corruption, GPT-2-medium CLM, each
# a full training step of the one trainer (forward, backward, AdamW).
#
#     bash bench/gpu.sh            # from a checkout; ~3-4 minutes
#
# Where the Python at $PY (default python3) already imports JAX, Flax, Optax
# and Orbax, the script runs the checkout in place with it, installing
# nothing but, if the zoo's imports need them, the wheels in .whl/ (offline,
# into $SITE): the way on a GPU machine without a package index, with .whl/
# filled beforehand by bench/gpu_wheels.sh on a machine with one. Otherwise
# it installs the package with its GPU extra into .venv-gpu.
#
# It then runs bench/train_step.py without the PyTorch reference. MFU is
# model FLOPs (3 x XLA's count of the forward loss) over the GPU's nominal
# dense bf16 peak (PEAK_TFLOPS, 989 for an H200 SXM); the measured matmul
# peak is printed beside it. The last line is the one summary line, e.g.
#   gpu bert-large zoo_mfu=<f> | t5-base zoo_mfu=<f> | gpt2-medium zoo_mfu=<f>
#
# Attention runs with attention_impl "auto" (cuDNN in bf16 on a GPU, XLA's
# fused kernel for shapes cuDNN refuses) and without attention dropout,
# which only the einsum path has.
#
# Sized for 5 minutes: batch 32 x 512 tokens, 2 warm-up and 8 timed steps.
# Environment overrides: BATCH, SEQ_LEN, STEPS, PEAK_TFLOPS, PEAK_N, MODELS,
# SIZE (every model's size, e.g. tiny), PY, SITE, WHEEL_DIR, and ALLOW_CPU=1:
# a dry run of the whole path on a machine without a GPU (the tests use it).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-python3}
SITE=${SITE:-/tmp/zoo-gpu-site}
WHEEL_DIR=${WHEEL_DIR:-.whl}
BATCH=${BATCH:-32}
SEQ_LEN=${SEQ_LEN:-512}
STEPS=${STEPS:-8}
PEAK_TFLOPS=${PEAK_TFLOPS:-989}
PEAK_N=${PEAK_N:-8192}
MODELS=${MODELS:-bert-large,t5-base,gpt2-medium}
SIZE=${SIZE:-}
export ALLOW_CPU=${ALLOW_CPU:-0}

if "$PY" -c "import jax, flax, optax, orbax.checkpoint" 2>/dev/null; then
  RUN=$PY
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
  if ! "$PY" -c "import zoo.train_lib, objectives, data" 2>/dev/null \
      && compgen -G "$WHEEL_DIR/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      --upgrade --target "$SITE" "$WHEEL_DIR"/*.whl
    export PYTHONPATH="$PYTHONPATH:$SITE"
  fi
else
  if [ ! -x .venv-gpu/bin/python ]; then
    "$PY" -m venv .venv-gpu
  fi
  .venv-gpu/bin/pip install -q -e '.[gpu]'
  RUN=.venv-gpu/bin/python
fi

# Let XLA take most of the GPU's memory up front, as a training run would.
export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.9}
"$RUN" - <<'PYEOF'
import importlib, os, sys
for module in ("zoo.train_lib", "objectives", "data"):
  try:
    importlib.import_module(module)
  except ModuleNotFoundError as e:
    sys.exit(f"bench/gpu.sh: importing {module} needs the package {e.name!r}, "
             "which this Python lacks; on a machine with a package index run "
             "bench/gpu_wheels.sh (add it to WHEELS) and bring .whl/ along")
import jax
if jax.default_backend() != "gpu" and os.environ["ALLOW_CPU"] != "1":
  sys.exit(f"bench/gpu.sh needs a GPU; jax sees {jax.devices()}")
print("devices", jax.devices(), "jax", jax.__version__, flush=True)
PYEOF

LOG=$(mktemp)
timeout 290 "$RUN" bench/train_step.py --no_hf \
  --models "$MODELS" ${SIZE:+--size "$SIZE"} --zoo_dtypes bfloat16 \
  --attention_impl auto --no_attention_dropout \
  --batch "$BATCH" --seq_len "$SEQ_LEN" --steps "$STEPS" --warmup 2 \
  --peak_n "$PEAK_N" --peak_tflops "$PEAK_TFLOPS" | tee "$LOG"
echo "gpu $(tail -n 1 "$LOG")"
