#!/usr/bin/env bash
# GPU check for a machine with an NVIDIA GPU: configure with CUDA, build, run every CPU-vs-CUDA comparison test
# (they fail, not skip, when no device is usable here) and the GPU benchmarks beside their CPU rows, in one go.
# Usage: scripts/gpu_check.sh [build-dir]   (default: build-gpu). On the device tool's machine, after
# `scripts/gpu_deps.sh fetch` here: run(command="scripts/gpu_check.sh", carry=[".gpu_debs"]). Everything
# printed is also written to $OUT/gpu_check.log when OUT is set (the device tool's output folder), else to
# BUILD/gpu_check.log.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build-gpu}"
JOBS="${JOBS:-$(nproc)}"
LOG="${OUT:-$BUILD}/gpu_check.log"
mkdir -p "$(dirname "$LOG")"
exec > >(tee "$LOG") 2>&1
TEE_PID=$!
trap 'exec 1>&- 2>&-; wait "$TEE_PID"' EXIT  # the log is whole when the script returns

# The device image has CUDA, CMake and ninja but not this build's Debian packages: carried as .deb files
# (scripts/gpu_deps.sh fetch, here; then `carry: [".gpu_debs"]`), they are unpacked under /opt/crl-deps.
if [ -d .gpu_debs ] && { [ ! -e /usr/include/boost/version.hpp ] || [ -n "${CRL_USE_GPU_DEBS:-}" ]; }; then
  # shellcheck source=scripts/gpu_deps.sh
  source scripts/gpu_deps.sh unpack
fi

if ! command -v nvidia-smi > /dev/null || ! nvidia-smi -L; then
  echo "gpu_check: no NVIDIA GPU visible (nvidia-smi)" >&2
  exit 1
fi
cmake -S . -B "$BUILD" -G Ninja -DCRL_CUDA=ON -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD" -j "$JOBS" --target crl engine_tests learner_tests lm_cuda_tests lm_serve_tests policy_tests \
  bench_learner bench_lm bench_neural

# device_tests BINARY FILTER: the comparison tests skip when no device is present; here a skip is a failure.
device_tests() {
  local out
  out="$("$BUILD/$1" --gtest_filter="$2" 2>&1)" || {
    echo "$out"
    exit 1
  }
  echo "$out" | tail -n 20
  if echo "$out" | grep -q "SKIPPED"; then
    echo "gpu_check: $1 $2 was skipped: no usable device" >&2
    exit 1
  fi
}

# cuBLAS is loaded on first use, not linked (engine/cuda/cublas_library.h): each check in its own process, as
# ctest runs them (the second skips where the first loaded it); then the engine's RNG kernel.
for check in IsNotMappedUntilFirstUsedAndThenHasItsFunctions AFileNamedInCrlCublasThatIsNotALibraryIsAnErrorNamingIt; do
  "$BUILD"/tests/engine/engine_tests --gtest_filter="CublasLibrary.$check" | tail -n 3
done
device_tests tests/engine/engine_tests 'RngCuda.*'
# The learner's kernels (GAE scan, losses) against the CPU reference, then the whole learner suite.
device_tests tests/learners/learner_tests 'LearnerCuda*:LearnerGaeScan*'
"$BUILD"/tests/learners/learner_tests
# The language model's CUDA twin against the CPU (policies/lm/cuda).
device_tests tests/policies/lm_cuda_tests 'LmCuda.*'
# `crl lm serve --backend cuda` against the CPU server.
device_tests tests/cli/lm_serve_tests 'LmServe.TheCudaBackend*'
# The neural policy's shared-trunk network on the device (policies/neural/cuda) against the CPU, and the
# policy's backend: cuda training against its cpu training.
device_tests tests/policies/policy_tests 'NeuralCuda.*:NeuralCudaPolicy.*'

# One recipe-shaped training run on each back-end (the committed base's shape, rotary positions, 300 SFT
# steps on the phase3 demonstrations; `crl lm train --backend`): wall time and the dev metrics side by side.
for backend in cpu cuda; do
  start=$(date +%s.%N)
  "$BUILD"/crl lm train --tokenizer data/tokenizers/synthetic_words1024.json --namespace phase3 --tasks 200 \
    --eval-tasks 10 --capacity 1024 --reserve 384 --summary-cap 96 --max-compactions 5 --per-turn-cap 48 \
    --d-model 32 --heads 2 --layers 2 --d-ff 128 --rope --steps 300 --batch 4 --seed 1 --backend "$backend" \
    --out "$BUILD/gpu_check_sft_$backend.ckpt" | grep "^after:"
  echo "crl lm train --backend $backend: $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')" \
    "s wall (300 steps, batch 4)"
done

# GPU benchmarks beside the CPU rows of the same binaries (the NumPy baseline is slow at 10M tokens: it is
# left out here; run bench_learner without a filter for the full table).
"$BUILD"/bench/bench_lm --benchmark_filter='LmCuda|LmTrainForward|LmSampleCached' --benchmark_counters_tabular=true
"$BUILD"/bench/bench_neural --benchmark_filter='NeuralCuda|NeuralForwardBackward' --benchmark_min_time=0.2 \
  --benchmark_counters_tabular=true
"$BUILD"/bench/bench_learner --benchmark_filter='Cuda|Cpu' --benchmark_counters_tabular=true
