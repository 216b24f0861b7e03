#!/bin/sh
# Reward 1 if answer.txt holds the number of ERROR lines of the original log (kept with the tests).
mkdir -p "$LOGS_DIR/verifier"
expected=$(grep -c ' ERROR ' "$TESTS_DIR/app.log.orig")
if [ "$(tr -d ' \n' < answer.txt 2>/dev/null)" = "$expected" ]; then
  echo 1 > "$LOGS_DIR/verifier/reward.txt"
else
  echo 0 > "$LOGS_DIR/verifier/reward.txt"
fi
