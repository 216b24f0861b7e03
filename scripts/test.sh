#!/usr/bin/env bash
# Command 2 of the README (and exactly what CI runs): install what is missing, build, run every test with
# ctest. Prints ctest's summary; exits non-zero if anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
ctest --test-dir "${CRL_BUILD_DIR:-build}" --output-on-failure -j "${CRL_JOBS:-$(nproc)}" --timeout 900
