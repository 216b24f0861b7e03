#!/bin/sh
# Reward 1 if sum.sh prints the sum, also for a different numbers file.
mkdir -p "$LOGS_DIR/verifier"
ok=1
[ "$(sh sum.sh)" = "60" ] || ok=0
printf '1\n2\n3\n' > numbers.txt
[ "$(sh sum.sh)" = "6" ] || ok=0
echo $ok > "$LOGS_DIR/verifier/reward.txt"
