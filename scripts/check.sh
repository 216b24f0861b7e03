#!/usr/bin/env bash
# Extra checks, not run in CI.
#   scripts/check.sh --sanitize   the whole suite under AddressSanitizer + UndefinedBehaviorSanitizer
#                                 (Debug build in build-sanitize/, CUDA off: sanitizers do not mix with nvcc)
#   scripts/check.sh --tsan [REGEX]  the suite (or the ctest tests matching REGEX) under ThreadSanitizer
#                                 (RelWithDebInfo build in build-tsan/, CUDA off; fibers annotated)
#   scripts/check.sh --format     clang-format check of every C++ file
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  --sanitize)
    export CRL_BUILD_DIR=build-sanitize CRL_BUILD_TYPE=Debug
    scripts/build.sh -DCRL_SANITIZE=ON -DCRL_CUDA=OFF -DCRL_BUILD_BENCH=OFF
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      ctest --test-dir build-sanitize --output-on-failure -j "$(nproc)" --timeout 1800
    ;;
  --tsan)
    export CRL_BUILD_DIR=build-tsan CRL_BUILD_TYPE=RelWithDebInfo
    scripts/build.sh -DCRL_SANITIZE_THREAD=ON -DCRL_CUDA=OFF -DCRL_BUILD_BENCH=OFF
    TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
      ctest --test-dir build-tsan --output-on-failure -j "$(nproc)" --timeout 1800 ${2:+-R "$2"}
    ;;
  --format)
    git ls-files '*.cpp' '*.h' '*.cu' | xargs clang-format --dry-run --Werror
    echo "format: clean"
    ;;
  *)
    echo "usage: scripts/check.sh --sanitize | --tsan [REGEX] | --format" >&2
    exit 2
    ;;
esac
