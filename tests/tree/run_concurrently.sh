#!/bin/sh
# Runs COPIES instances of one test binary at the same time, with the same environment (so the same $TMPDIR),
# and fails when any instance fails: two suites running at once must not touch each other's files (issue 14).
# Usage: run_concurrently.sh COPIES BINARY [ARGS...]; pass --gtest_repeat=N to widen the overlap.
set -u
copies=$1
shift
logs=$(mktemp -d "${TMPDIR:-/tmp}/crl_concurrent_XXXXXX") || exit 1
trap 'rm -rf "$logs"' EXIT
pids=""
i=0
while [ "$i" -lt "$copies" ]; do
  "$@" >"$logs/$i.log" 2>&1 &
  pids="$pids $!"
  i=$((i + 1))
done
status=0
i=0
for pid in $pids; do
  if ! wait "$pid"; then
    echo "instance $i of $copies failed: $*"
    tail -n 40 "$logs/$i.log"
    status=1
  fi
  i=$((i + 1))
done
[ "$status" -eq 0 ] && echo "$copies concurrent instances passed: $*"
exit "$status"
