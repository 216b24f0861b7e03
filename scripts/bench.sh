#!/usr/bin/env bash
# Builds every benchmark binary (bench/*_bench.cpp -> build/bench/bench_*) and `crl`, then runs them all with
# `crl bench`, which uses a per-binary filter and minimum time (cli/bench_command.cpp; `build/crl bench --list`)
# so that the whole run stays under 10 minutes on 2 cores, and rewrites the generated tables of
# bench/RESULTS.md between their `<!-- bench:NAME -->` markers. Arguments go to `crl bench`, e.g.
#   scripts/bench.sh --filter 'engine|simulation'      # only those binaries
#   scripts/bench.sh --dry-run                         # the commands, nothing run
# CRL_BUILD_DIR (default build) and CRL_JOBS (default 2) choose the build; CRL_BENCH_NO_BUILD=1 skips it.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${CRL_BUILD_DIR:-build}
jobs=${CRL_JOBS:-2}
if [ "${CRL_BENCH_NO_BUILD:-0}" != 1 ]; then
  [ -d "$build_dir" ] || scripts/build.sh >/dev/null
  targets=(crl)
  for source in bench/*_bench.cpp; do
    name=$(basename "$source" _bench.cpp)
    targets+=("bench_$name")
  done
  # One target at a time: a benchmark another branch has not wired into CMake yet is skipped, not fatal.
  for target in "${targets[@]}"; do
    cmake --build "$build_dir" -j "$jobs" --target "$target" >/dev/null 2>&1 ||
      echo "bench.sh: target $target not built (not in CMake yet, or a build error); skipped" >&2
  done
fi
exec "$build_dir/crl" bench --bench-dir "$build_dir/bench" "$@"
