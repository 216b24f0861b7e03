#!/usr/bin/env bash
# Runs the neural network's CUDA tests against policies/neural/cuda/network_cuda.cu compiled as HOST code with
# the emulated CUDA runtime and cuBLAS of tests/policies/lm/cuda_emulation (one fiber per CUDA thread, a
# reference column-major SGEMM, cudaMalloc memory poisoned with NaN bytes): a check of the kernels' index math
# (group offsets, per-group heads, the rows x heads score layout, pooling, strides) and of the GEMM transposes
# on a machine without a GPU. It is not a substitute for scripts/gpu_check.sh on a real device (no GPU float
# behaviour, no races, no launch limits). Not part of ctest.
#
# Usage: tests/policies/neural_cuda_emulation.sh [gtest filter]
#   tests/policies/neural_cuda_test.cpp (the twin against Network), standalone (about a minute);
#   default filter NeuralCuda*.
# Usage: tests/policies/neural_cuda_emulation.sh --policy [BUILD] [gtest filter]
#   tests/policies/neural_cuda_policy_test.cpp (the policy's backend: cuda against its cpu training), linked
#   with the objects of BUILD (default build; run `cmake --build BUILD --target policy_tests` first) in place
#   of the real twin; default filter NeuralCudaPolicy.*.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT="$PWD"
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
if [[ "${1:-}" != "--policy" ]]; then  # the standalone comparison
  g++ "${FLAGS[@]}" "$WORK/network_cuda_emu.cpp" policies/neural/network.cpp engine/error.cpp \
    "$EMU/emu_device.cpp" tests/policies/neural_cuda_test.cpp -lgtest -lgtest_main -o "$WORK/emu_test"
  "$WORK/emu_test" --gtest_filter="${1:-NeuralCuda*}"
  exit 0
fi
BUILD="${2:-build}"
FILTER="${3:-NeuralCudaPolicy.*}"
g++ "${FLAGS[@]}" -c "$WORK/network_cuda_emu.cpp" -o "$WORK/network_cuda_emu.o"
g++ "${FLAGS[@]}" -c "$EMU/emu_device.cpp" -o "$WORK/emu_device.o"
# The policy-level test compiled alone with policy_tests' flags (a unity build has no object of its own).
COMPILE="$(ninja -C "$BUILD" -t commands tests/policies/policy_tests | awk '/ -c [^ ]*(policy_tests\.dir\/|_test\.cpp$)/ && !n++' |
  sed 's/ -MD -MT [^ ]* -MF [^ ]*//; s/ -o [^ ]* -c [^ ]*$//')"
(cd "$BUILD" && $COMPILE -o "$WORK/neural_cuda_policy_test.o" -c "$ROOT/tests/policies/neural_cuda_policy_test.cpp")
# policy_tests' link line with the emulated twin in place of the real one (or of the stub) and only the
# policy-level test's object.
LINK="$(ninja -C "$BUILD" -t commands tests/policies/policy_tests | tail -n 1 | sed 's/ && cd .*//; s/^: && //')"
ARGS=()
for word in $LINK; do
  case "$word" in
    *neural/cuda/network_cuda*) ;;
    tests/policies/CMakeFiles/policy_tests.dir/*) ;;
    tests/policies/policy_tests) ARGS+=("$WORK/policy_emu") ;;
    -o) ARGS+=("$WORK/network_cuda_emu.o" "$WORK/emu_device.o"
               "$WORK/neural_cuda_policy_test.o" -o) ;;
    *) ARGS+=("$word") ;;
  esac
done
(cd "$BUILD" && "${ARGS[@]}")
cd "$ROOT" && "$WORK/policy_emu" --gtest_filter="$FILTER"
