#!/usr/bin/env bash
# Fetches the wheels that bench/gpu.sh needs on a GPU machine which has JAX,
# Flax, Optax and Orbax installed but cannot reach a package index: the
# zoo's other imports on the benchmark's path. Run it where pip reaches PyPI;
# it writes them to .whl/ (ignored by git), which travels to the GPU machine
# beside the checkout; bench/gpu.sh there installs them without an index.
#
#     bash bench/gpu_wheels.sh     # then, on the GPU machine: bash bench/gpu.sh
#
# Environment overrides: PY (the pip to use), PYVER (the GPU machine's
# Python, default 3.12), WHEELS (name==version list).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-python3}
PYVER=${PYVER:-3.12}
WHEELS=${WHEELS:-"array-record==0.8.6 grain==0.2.18 ml-collections==1.1.0 portpicker==1.6.0"}

mkdir -p .whl
# shellcheck disable=SC2086  # WHEELS is a word list
"$PY" -m pip download -q --no-deps --only-binary=:all: \
  --python-version "$PYVER" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux1_x86_64 -d .whl $WHEELS
ls -1 .whl
