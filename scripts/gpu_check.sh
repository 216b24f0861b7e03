#!/usr/bin/env bash
# GPU check for a machine with an NVIDIA GPU: configure with CUDA, build the learner tests and benchmarks,
# run the CPU-vs-CUDA comparison tests (they fail, not skip, when no device is usable here) and the GPU
# benchmarks, in one go. Usage: scripts/gpu_check.sh [build-dir]   (default: build-gpu)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build-gpu}"
JOBS="${JOBS:-$(nproc)}"

if ! command -v nvidia-smi > /dev/null || ! nvidia-smi -L; then
  echo "gpu_check: no NVIDIA GPU visible (nvidia-smi)" >&2
  exit 1
fi
cmake -S . -B "$BUILD" -G Ninja -DCRL_CUDA=ON -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD" -j "$JOBS" --target learner_tests bench_learner

# The comparison tests skip when no device is present; here a skip is a failure.
OUT="$("$BUILD"/tests/learners/learner_tests --gtest_filter='LearnerCuda*:LearnerGaeScan*' 2>&1)" || {
  echo "$OUT"
  exit 1
}
echo "$OUT" | tail -n 20
if echo "$OUT" | grep -q "SKIPPED"; then
  echo "gpu_check: CUDA tests were skipped: no usable device" >&2
  exit 1
fi
"$BUILD"/tests/learners/learner_tests

# The language model's CUDA twin against the CPU (policies/lm/cuda): a skip is a failure here too.
cmake --build "$BUILD" -j "$JOBS" --target lm_cuda_tests
OUT="$("$BUILD"/tests/policies/lm_cuda_tests --gtest_filter='LmCuda.*' 2>&1)" || {
  echo "$OUT"
  exit 1
}
echo "$OUT" | tail -n 10
if echo "$OUT" | grep -q "SKIPPED"; then
  echo "gpu_check: LmCuda tests were skipped: no usable device" >&2
  exit 1
fi
# The neural policy's shared-trunk network on the device (policies/neural/cuda) against the CPU, and the
# policy's backend: cuda training against its cpu training: a skip is a failure here too.
cmake --build "$BUILD" -j "$JOBS" --target policy_tests
OUT="$("$BUILD"/tests/policies/policy_tests --gtest_filter='NeuralCuda.*:NeuralCudaPolicy.*' 2>&1)" || {
  echo "$OUT"
  exit 1
}
echo "$OUT" | tail -n 10
if echo "$OUT" | grep -q "SKIPPED"; then
  echo "gpu_check: NeuralCuda tests were skipped: no usable device" >&2
  exit 1
fi
cmake --build "$BUILD" -j "$JOBS" --target bench_lm
"$BUILD"/bench/bench_lm --benchmark_filter='LmCuda|LmTrainForward' --benchmark_counters_tabular=true

# GPU benchmarks beside the CPU rows of the same binary (the NumPy baseline is slow at 10M tokens: it is
# left out here; run bench_learner without a filter for the full table).
"$BUILD"/bench/bench_learner --benchmark_filter='Cuda|Cpu' --benchmark_counters_tabular=true
