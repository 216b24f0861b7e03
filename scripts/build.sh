#!/usr/bin/env bash
# Configures and builds the project in build/ (Release by default; CUDA back-ends when nvcc exists).
# Extra arguments go to cmake's configure step, e.g. scripts/build.sh -DCRL_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${CRL_BUILD_DIR:-build}
jobs=${CRL_JOBS:-$(nproc)}
generator=()
command -v ninja >/dev/null && [ ! -f "$build_dir/Makefile" ] && generator=(-G Ninja)
cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE="${CRL_BUILD_TYPE:-Release}" "$@" >/dev/null
cmake --build "$build_dir" -j "$jobs"
