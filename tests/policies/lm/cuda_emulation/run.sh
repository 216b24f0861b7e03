#!/usr/bin/env bash
# Runs tests/policies/lm/lm_cuda_test.cpp against policies/lm/cuda/lm_cuda.cu compiled as HOST code with the
# emulated CUDA runtime and cuBLAS of this folder: a check of the kernels' index math (packed offsets, causal
# masks, strides, reductions) and of the row-major GEMM transposes on a machine without a GPU. It is not a
# substitute for scripts/gpu_check.sh on a real device (no float behaviour of the GPU, no races, no launch
# limits). Slow (minutes: one fiber per CUDA thread); not part of ctest.
# Usage: tests/policies/lm/cuda_emulation/run.sh [gtest filter]   (default: LmCuda.ForwardAndEvery*)
# CRL_EMU_SOURCE=FILE runs FILE in place of policies/lm/cuda/lm_cuda.cu (a seeded bug, to see a test fail).
set -euo pipefail
cd "$(dirname "$0")/../../../.."
HERE=tests/policies/lm/cuda_emulation
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
# kernel<<<grid, block>>>(args) -> emu_launch(kernel, grid, block, args)
python3 - "$WORK" "${CRL_EMU_SOURCE:-policies/lm/cuda/lm_cuda.cu}" <<'PY'
import re, sys
s = open(sys.argv[2]).read()
s = re.sub(r"([\w:]+)<<<(.*?)>>>\(", r"emu_launch(\1, \2, ", s, flags=re.S)
open(sys.argv[1] + "/lm_cuda_emu.cpp", "w").write(s)
PY
FLAGS=(-std=c++20 -O2 -pthread "-I$HERE" -I. -I/usr/include/eigen3 -Itests/policies/lm)
g++ "${FLAGS[@]}" "$WORK/lm_cuda_emu.cpp" policies/lm/cpu/model.cpp policies/lm/cpu/sampler.cpp engine/error.cpp engine/heap.cpp \
  "$HERE/emu_device.cpp" \
  tests/policies/lm/lm_cuda_test.cpp -lgtest -lgtest_main -o "$WORK/emu_test"
"$WORK/emu_test" --gtest_filter="${1:-LmCuda.ForwardAndEvery*}"
