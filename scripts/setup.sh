#!/usr/bin/env bash
# Command 1 of the README: install what is missing, build (Release), run the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
echo
echo "== main job: crl run scenarios/memory_chain.pbtxt --out results/memory_chain =="
build/crl run scenarios/memory_chain.pbtxt --out results/memory_chain
echo
echo "results in results/memory_chain/: summary.json, curves.csv, curves.svg (open in a browser), report.md"
echo "the compaction demo with a readable trace: build/crl run"
