#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (-fsanitize=fuzzer,address,undefined) in build-fuzz/ and runs each
# for SECONDS seconds (default 60), starting from the seed corpus in tests/fuzz/corpus/<target>. Not run in CI.
# Prints, per target, the executions, the corpus size and any findings (crash-*, leak-*, timeout-* files in
# build-fuzz/artifacts/<target>/); exits 1 if any target found something.
#
#   scripts/fuzz.sh 300            # five minutes per target
#   JOBS=2 scripts/fuzz.sh 60      # build parallelism (default 2)
#   TARGETS="http_request" scripts/fuzz.sh 300   # only these targets (default: all three)
set -euo pipefail
SECONDS_PER_TARGET=${1:-60}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$ROOT/build-fuzz
JOBS=${JOBS:-2}

CC=clang CXX=clang++ cmake -S "$ROOT/tests/fuzz" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
TARGETS=${TARGETS:-request_decoder scenario_parser http_request}
cmake --build "$BUILD" -j"$JOBS" --target $(for t in $TARGETS; do echo "fuzz_$t"; done)

status=0
for target in $TARGETS; do
  binary=$BUILD/fuzz_$target
  seeds=$ROOT/tests/fuzz/corpus/$target
  corpus=$BUILD/corpus/$target
  artifacts=$BUILD/artifacts/$target
  mkdir -p "$corpus" "$artifacts"
  log=$BUILD/$target.log
  echo "== fuzz_$target: ${SECONDS_PER_TARGET}s, seeds $(ls "$seeds" | wc -l)"
  set +e
  "$binary" -max_total_time="$SECONDS_PER_TARGET" -max_len=8192 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "$corpus" "$seeds" >"$log" 2>&1
  rc=$?
  set -e
  runs=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | tail -1 || true)
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  findings=$(ls "$artifacts" | wc -l)
  echo "   exit $rc; executions $execs ($runs); corpus $(ls "$corpus" | wc -l) files; findings $findings"
  if [[ $rc -ne 0 || $findings -ne 0 ]]; then
    status=1
    tail -40 "$log"
  fi
done
exit $status
