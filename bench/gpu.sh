#!/usr/bin/env bash
# MFU of the zoo on one GPU (H200 class), in bfloat16 with cuDNN flash
# attention: BERT-large MLM, T5-base span corruption, GPT-2-medium CLM, each
# a full training step of the one trainer (forward, backward, AdamW).
#
#     bash bench/gpu.sh            # from a fresh checkout; ~3-4 minutes
#
# Installs the package with its GPU extra into .venv-gpu (nothing else), then
# runs bench/train_step.py without the PyTorch reference. MFU is model FLOPs
# (3 x XLA's count of the forward loss) over the GPU's nominal dense bf16
# peak (PEAK_TFLOPS, 989 for an H200 SXM); the measured matmul peak is
# printed beside it. The last line is the one summary line, e.g.
#   gpu bert-large zoo_mfu=<f> | t5-base zoo_mfu=<f> | gpt2-medium zoo_mfu=<f>
#
# Attention runs with attention_impl "auto" (cuDNN in bf16 on a GPU, XLA's
# fused kernel for shapes cuDNN refuses) and without attention dropout,
# which only the einsum path has.
#
# Sized for 5 minutes: batch 32 x 512 tokens, 2 warm-up and 8 timed steps.
# Environment overrides: BATCH, SEQ_LEN, STEPS, PEAK_TFLOPS, MODELS, PY.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-python3}
BATCH=${BATCH:-32}
SEQ_LEN=${SEQ_LEN:-512}
STEPS=${STEPS:-8}
PEAK_TFLOPS=${PEAK_TFLOPS:-989}
MODELS=${MODELS:-bert-large,t5-base,gpt2-medium}

if [ ! -x .venv-gpu/bin/python ]; then
  "$PY" -m venv .venv-gpu
fi
.venv-gpu/bin/pip install -q -e '.[gpu]'

# Let XLA take most of the GPU's memory up front, as a training run would.
export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.9}
.venv-gpu/bin/python - <<'PYEOF'
import jax, sys
if jax.default_backend() != "gpu":
  sys.exit(f"bench/gpu.sh needs a GPU; jax sees {jax.devices()}")
print("devices", jax.devices(), flush=True)
PYEOF

LOG=$(mktemp)
timeout 290 .venv-gpu/bin/python bench/train_step.py --no_hf \
  --models "$MODELS" --zoo_dtypes bfloat16 --attention_impl auto --no_attention_dropout \
  --batch "$BATCH" --seq_len "$SEQ_LEN" --steps "$STEPS" --warmup 2 \
  --peak_n 8192 --peak_tflops "$PEAK_TFLOPS" | tee "$LOG"
echo "gpu $(tail -n 1 "$LOG")"
