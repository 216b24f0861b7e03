#!/usr/bin/env bash
# Runs tests/policies/neural_cuda_test.cpp against policies/neural/cuda/network_cuda.cu compiled as HOST code
# with the emulated CUDA runtime and cuBLAS of tests/policies/lm/cuda_emulation (one fiber per CUDA thread, a
# reference column-major SGEMM, cudaMalloc memory poisoned with NaN bytes): a check of the kernels' index math
# (group offsets, per-group heads, the rows x heads score layout, pooling, strides) and of the GEMM transposes
# on a machine without a GPU. It is not a substitute for scripts/gpu_check.sh on a real device (no GPU float
# behaviour, no races, no launch limits), and the policy-level test (neural_cuda_policy_test.cpp, which needs
# the whole engine) does not run here. Not part of ctest (about a minute).
# Usage: tests/policies/neural_cuda_emulation.sh [gtest filter]   (default: NeuralCuda*)
set -euo pipefail
cd "$(dirname "$0")/../.."
EMU=tests/policies/lm/cuda_emulation
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
# kernel<<<grid, block>>>(args) -> emu_launch(kernel, grid, block, args)
python3 - "$WORK" <<'PY'
import re, sys
s = open("policies/neural/cuda/network_cuda.cu").read()
s = re.sub(r"([\w:]+)<<<(.*?)>>>\(", r"emu_launch(\1, \2, ", s, flags=re.S)
open(sys.argv[1] + "/network_cuda_emu.cpp", "w").write(s)
PY
FLAGS=(-std=c++20 -O2 -pthread "-I$EMU" -I. -I/usr/include/eigen3)
g++ "${FLAGS[@]}" "$WORK/network_cuda_emu.cpp" policies/neural/network.cpp engine/error.cpp "$EMU/emu_device.cpp" \
  tests/policies/neural_cuda_test.cpp -lgtest -lgtest_main -o "$WORK/emu_test"
"$WORK/emu_test" --gtest_filter="${1:-NeuralCuda*}"
