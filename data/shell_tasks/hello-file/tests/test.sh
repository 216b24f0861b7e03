#!/bin/sh
# Reward 1 if hello.txt holds exactly "Hello, world!".
mkdir -p "$LOGS_DIR/verifier"
if [ "$(cat hello.txt 2>/dev/null)" = "Hello, world!" ]; then
  echo 1 > "$LOGS_DIR/verifier/reward.txt"
else
  echo 0 > "$LOGS_DIR/verifier/reward.txt"
fi
