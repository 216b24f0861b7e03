#!/usr/bin/env bash
# Command 1 of the README: install what is missing, build (Release), run the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
echo
echo "== main job: crl run (the compaction demo) =="
build/crl run
