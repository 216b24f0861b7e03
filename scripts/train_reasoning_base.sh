#!/usr/bin/env bash
# Trains the language-model base that scenarios/synthetic_tinylm_reasoning.pbtxt starts every arm from
# (data/checkpoints/synthetic_tinylm_reasoning_base.ckpt), from scratch, in one command, then measures it in
# closed loop. Issue 17: "regenerating this file from scratch with one command (and showing that other seeds
# reach the same level)".
#
#   scripts/train_reasoning_base.sh --seed 1 --out results/reasoning_base/seed-1
#   scripts/train_reasoning_base.sh --seed 1 --out DIR --stages-only     # train, no closed-loop evaluation
#   scripts/train_reasoning_base.sh --seed 1 --out DIR --eval-tasks 10   # a shorter evaluation
#   scripts/train_reasoning_base.sh --evaluate data/checkpoints/synthetic_tinylm_reasoning_base.ckpt \
#       --out results/reasoning_base/committed     # only the evaluation, of an existing checkpoint
#
# The stages are the chain that made the committed file (data/README.md; scenarios/README.md, fifth to seventh
# sessions), written down as one recipe: every stage is a `crl lm train` on the 1,440 `phase3` training tasks
# with the words tokenizer, the base's budget (C 1024, T_comp 384, summary cap 96, 5 compactions) and summary
# and final-answer weights 8, each starting from the previous stage's checkpoint (`--init`):
#   1 short_drills     a fresh model (d_model 32, 2 heads, 2 layers, d_ff 128, rotary positions): 3,000
#                      steps of short copy drills, 16 per step (8 per step stalled at chance on two seeds)
#   2 long_drills_sft  1,500 steps of long copy drills (gaps up to 700, 8 per step), half of them key = value
#                      lookups (`--copy-drill-lookup 0.5`), then 4,000 SFT steps (batch 4, warm-up 30, cosine
#                      from 3e-3) with 2,400 such drills mixed in; per-turn cap 48. The lookups are the one
#                      change from the committed file's chain (see "The gate" below: without them stage 2
#                      formed the answer's copy on 2 of 12 seeds)
#   3 sft_more         4,000 more SFT steps at a constant 1e-3 (the same mix, in the short drills' shape: the
#                      long shape needs long drill steps); per-turn cap 48. Stages 1-3: the fifth session's sftF
#   4 notes            with reasoning (a <think> block of the oracle's notes before the answer), 1,500 steps,
#                      warm-up 30, cosine from 1e-3; per-turn cap 96 from here on
#   5 final32          1,500 steps at 1e-3 with the final answer's weight 32
#   6 windows          1,000 steps at 1e-3 with 32 answer windows (16 tokens and doubling) per step
#   7 windows_b1       1,000 steps at 1e-3 with batch 1 and 32 answer windows per step
# The gate after stage 2. Seeds part already in stage 2, and for good: on the first four seeds the final
# `submit`'s teacher-forced exact on the 180 phase3 dev tasks (tasks that no closed-loop evaluation plays) was
# 0.006 / 0.62 / 0.017 / 0.29 after stage 2 and 0.011 / 0.63 / 0.011 / 0.33 after stage 3 (seeds 1-4), and
# the two seeds near zero ended at 0 and 1 of 60 in closed loop, the other two at 22 and 11 (data/README.md).
# More training of the same run did not move a seed across (seed 3: stage 3's 4,000 steps, 0.017 -> 0.011).
# So after stage 2 the recipe measures that number (`crl lm train --eval-only --eval-namespace phase3`) and,
# below 0.15, starts over from a fresh model with the seed N + 1000 (then N + 2000, N + 3000) in
# DIR/attempt-K/; after four failed attempts it stops with an error and no base. The threshold and the number
# of attempts were fixed (2026-12-04 16:08 UTC) from those four seeds' numbers, before any retry ran. Each
# attempt's number is in DIR/gates.txt and at the head of DIR/stages.txt. Without lookups in stage 2 the gate
# then failed on all four attempts of seeds 1 and 3 (2 of 12 stage-2 runs passed); with them, on five fresh
# seeds planned before they ran (5-9), it passed on 3 (5, 6, 8), and seeds 5 and 6 won 21 and 23 of 60 greedy
# in closed loop (data/README.md has each number), so they are in stage 2. On two more fresh seeds (10, 11;
# seventeenth session) seed 11 passed at once and won 23 of 60, seed 10 missed all four attempts (no base):
# with lookups the gate passes on 4 of 10 stage-2 runs so far, so a seed gets a base about 87% of the time.
# Each stage writes DIR/stage-N-NAME.ckpt (an attempt K > 0: DIR/attempt-K/stage-N-NAME.ckpt) and its log; a stage whose checkpoint exists is not run again, so a
# killed run resumes at the stage it was in (each checkpoint is written to a temporary file and renamed by
# `crl lm train`). Where the committed file's chain is not recorded exactly (stage 2's mix, stages 4-6's
# schedule), the choice above is this recipe's, fixed before any seed of it ran.
#
# Then the closed-loop evaluation, as data/README.md measures the committed file: `crl lm serve` of the final
# checkpoint on a free loopback port and `crl rollout --reasoning` on the first N default-dev tasks
# (default 60) with the scenario's budget, greedy (temperature 0) and sampled (temperature 1, seed 7), each
# written to DIR/dev-greedy.jsonl / DIR/dev-sampled.jsonl, and DIR/summary.txt with the wins per task type.
# CRL (default build/crl) chooses the binary; THREADS (default 1) the training threads (the same bits).
set -euo pipefail
# The whole script is one block, read before any of it runs: editing the file during a run of hours must not
# change the run (bash otherwise reads a script as it goes).
{
root=$(cd "$(dirname "$0")/.." && pwd)

usage() {
  echo "usage: scripts/train_reasoning_base.sh (--seed N | --evaluate CKPT) --out DIR [--eval-tasks N] [--stages-only]" >&2
  exit 2
}
seed=""
out=""
eval_tasks=60
stages_only=0
evaluate=""
while [ $# -gt 0 ]; do
  case "$1" in
  --seed) seed=${2:-}; shift 2 || usage ;;
  --out) out=${2:-}; shift 2 || usage ;;
  --eval-tasks) eval_tasks=${2:-}; shift 2 || usage ;;
  --stages-only) stages_only=1; shift ;;
  --evaluate) evaluate=${2:-}; shift 2 || usage ;;
  *) echo "train_reasoning_base.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
if [ -n "$evaluate" ]; then
  [ -z "$seed" ] || { echo "train_reasoning_base.sh: --evaluate trains nothing: leave out --seed" >&2; exit 2; }
  [ -f "$evaluate" ] || { echo "train_reasoning_base.sh: --evaluate $evaluate: no such file" >&2; exit 2; }
  [ "$stages_only" = 0 ] || { echo "train_reasoning_base.sh: --evaluate and --stages-only exclude each other" >&2; exit 2; }
else
  [[ "$seed" =~ ^[0-9]{1,15}$ ]] || { echo "train_reasoning_base.sh: --seed must be a non-negative integer of at most 15 digits, got '$seed'" >&2; exit 2; }
fi
[ -n "$out" ] || { echo "train_reasoning_base.sh: --out DIR is required" >&2; exit 2; }
[[ "$eval_tasks" =~ ^[1-9][0-9]*$ ]] || { echo "train_reasoning_base.sh: --eval-tasks must be a positive integer, got '$eval_tasks'" >&2; exit 2; }

# Paths given relative to where the command runs; the recipe itself runs from the repository's root.
out=$(realpath -m "$out")
[ -z "$evaluate" ] || evaluate=$(realpath "$evaluate")
crl=${CRL:-$root/build/crl}
crl=$(realpath -m "$crl")
cd "$root"
threads=${THREADS:-1}
attempts=4 # stages 1-2 tried at most this often (seeds N, N + 1000, N + 2000, N + 3000)
gate=0.15  # the final actions' exact on phase3 dev that stage 2 must reach (see the header)
tokenizer=data/tokenizers/synthetic_words1024.json
[ -x "$crl" ] || { echo "train_reasoning_base.sh: $crl not found (build first: scripts/build.sh)" >&2; exit 2; }
mkdir -p "$out"
if [ -z "$evaluate" ]; then
  # A resumed run must be the same run: stages of another seed in DIR would be taken as this seed's.
  if [ -f "$out/seed" ] && [ "$(cat "$out/seed")" != "$seed" ]; then
    echo "train_reasoning_base.sh: $out holds the stages of seed $(cat "$out/seed"), not $seed: use another --out" >&2
    exit 2
  fi
  echo "$seed" > "$out/seed"
fi

budget=(--capacity 1024 --reserve 384 --summary-cap 96 --max-compactions 5)
common=(--tokenizer "$tokenizer" --namespace phase3 --split train --tasks 1440 --threads "$threads" "${budget[@]}"
  --summary-weight 8)
previous=""
trained=0
attempt_dir=$out   # where this attempt's stages live (attempt 0: DIR itself)
attempt_seed=$seed # the seed of this attempt's every stage
stage() {  # stage NAME ARGS...: one `crl lm train` from the previous stage's checkpoint
  local name=$1
  shift
  local ckpt="$attempt_dir/stage-$name.ckpt"
  local log="$attempt_dir/stage-$name.log"
  if [ -f "$ckpt" ]; then
    echo "stage $name: $ckpt exists, not run again"
  else
    echo "stage $name: started $(date -u +%H:%M:%S)"
    local init=()
    [ -n "$previous" ] && init=(--init "$previous")
    local started=$SECONDS
    "$crl" lm train "${common[@]}" --seed "$attempt_seed" "${init[@]}" "$@" --out "$ckpt" > "$log" 2>&1 || {
      echo "train_reasoning_base.sh: stage $name failed; its log: $log" >&2
      tail -5 "$log" >&2
      exit 1
    }
    echo "stage $name: done in $((SECONDS - started)) s"
  fi
  previous=$ckpt
  teacher_forced "$name" >> "$out/stages.txt.tmp"
}
# The gate after stage 2 (see the header): the final `submit`'s teacher-forced exact on the 180 phase3 dev
# tasks, which no closed-loop evaluation plays, under stage 2's budget. Prints the number.
gate_exact() {
  local log="$attempt_dir/gate.log"
  "$crl" lm train --tokenizer "$tokenizer" --init "$previous" --eval-only --eval-namespace phase3 \
    --eval-tasks 180 "${budget[@]}" --per-turn-cap 48 > "$log" 2>&1 || {
    echo "train_reasoning_base.sh: the gate's evaluation failed; its log: $log" >&2
    tail -5 "$log" >&2
    exit 1
  }
  local exact
  exact=$(sed -n 's/^dev: .*; final actions [0-9.]* \/ \([0-9.]*\) .*/\1/p' "$log")
  [ -n "$exact" ] || { echo "train_reasoning_base.sh: no final actions' exact in $log" >&2; exit 1; }
  echo "$exact"
}
# The teacher-forced dev metrics a stage's log ends with (`crl lm train`'s "after:" line), one line per stage
# for summary.txt: the final `submit`'s exact (written straight from the context) and, with notes, the answer's
# exact after the oracle's notes. Where seeds part (data/README.md): after stage 3 the final actions' exact.
teacher_forced() {
  local after
  after=$({ grep '^after:' "$attempt_dir/stage-$1.log" 2>/dev/null || true; } | tail -n 1)  # no log: n/a
  local final notes
  final=$(sed -n 's/.*; final actions [0-9.]* \/ \([0-9.]*\) .*/\1/p' <<< "$after")
  notes=$(sed -n 's/.*; answers after the notes [0-9.]* \/ \([0-9.]*\) .*/\1/p' <<< "$after")
  echo "stage $1: teacher-forced dev exact: final actions ${final:-n/a}, answers after the notes ${notes:-n/a}"
}

if [ -z "$evaluate" ]; then
  passed=0
  rm -f "$out/gates.txt.tmp"
  for attempt in $(seq 0 $((attempts - 1))); do
    attempt_seed=$((seed + 1000 * attempt))
    attempt_dir=$out
    [ "$attempt" = 0 ] || attempt_dir=$out/attempt-$attempt
    mkdir -p "$attempt_dir"
    previous=""
    rm -f "$out/stages.txt.tmp"
    stage 1-short_drills --d-model 32 --heads 2 --layers 2 --d-ff 128 --rope --per-turn-cap 48 \
      --final-weight 8 --copy-drill-steps 3000 --copy-drill-batch 16 --steps 0
    stage 2-long_drills_sft --per-turn-cap 48 --final-weight 8 --copy-drill-long-steps 1500 \
      --copy-drill-gap 700 --copy-drill-lookup 0.5 --copy-drill-batch 8 --copy-drill-mix 2400 --steps 4000 --batch 4 \
      --lr 3e-3 --warmup 30 --cosine
    exact=$(gate_exact)
    verdict=failed
    awk -v x="$exact" -v t="$gate" 'BEGIN { exit !(x + 0 >= t + 0) }' && verdict=passed
    echo "gate, attempt $attempt (seed $attempt_seed): final actions exact $exact on 180 phase3 dev tasks" \
      "(passes at >= $gate): $verdict" | tee -a "$out/gates.txt.tmp"
    if [ "$verdict" = passed ]; then
      passed=1
      break
    fi
  done
  mv "$out/gates.txt.tmp" "$out/gates.txt"
  if [ "$passed" = 0 ]; then
    echo "train_reasoning_base.sh: stage 2 missed the gate on all $attempts attempts (seeds $seed, $((seed + 1000))," \
      "... $attempt_seed): no base; $out/gates.txt has each attempt's number" >&2
    exit 1
  fi
  stage 3-sft_more --per-turn-cap 48 --final-weight 8 --copy-drill-mix 2400 --steps 4000 --batch 4 --lr 1e-3
  stage 4-notes --reasoning --per-turn-cap 96 --final-weight 8 --steps 1500 --batch 4 --lr 1e-3 --warmup 30 \
    --cosine
  stage 5-final32 --reasoning --per-turn-cap 96 --final-weight 32 --steps 1500 --batch 4 --lr 1e-3
  stage 6-windows --reasoning --per-turn-cap 96 --final-weight 8 --answer-window 16 --answer-batch 32 \
    --steps 1000 --batch 4 --lr 1e-3
  stage 7-windows_b1 --reasoning --per-turn-cap 96 --final-weight 8 --answer-window 16 --answer-batch 32 \
    --steps 1000 --batch 1 --lr 1e-3
  cp "$previous" "$out/base.ckpt.tmp" && mv "$out/base.ckpt.tmp" "$out/base.ckpt"
  cat "$out/gates.txt" "$out/stages.txt.tmp" > "$out/stages.txt.new" && mv "$out/stages.txt.new" "$out/stages.txt"
  rm "$out/stages.txt.tmp"
  cat "$out/stages.txt"
  echo "base: $out/base.ckpt"
  [ "$stages_only" = 1 ] && exit 0
  evaluate=$out/base.ckpt
  trained=1
fi

# Closed loop: serve the checkpoint on a free port, play the first N default-dev tasks greedy and sampled.
serve_log=$out/serve.log
# The log exists before the server starts: a background job opens its redirection after the fork, so the
# first read below could otherwise come first and fail (sed: can't read ...), ending the script under set -e.
: > "$serve_log"
"$crl" lm serve --checkpoint "$evaluate" --tokenizer "$tokenizer" --port 0 >> "$serve_log" 2>&1 &
server=$!
# Stop the server when the script ends, however it ends, and wait for it: no server outlives the script.
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
port=""
for _ in $(seq 1 100); do
  port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$serve_log")
  [ -n "$port" ] && break
  kill -0 $server 2>/dev/null || { echo "train_reasoning_base.sh: crl lm serve exited:" >&2; cat "$serve_log" >&2; exit 1; }
  sleep 0.1
done
[ -n "$port" ] || { echo "train_reasoning_base.sh: crl lm serve did not print its port within 10 s" >&2; exit 1; }
summary=$out/summary.txt.tmp
echo "checkpoint $evaluate (sha256 $(sha256sum "$evaluate" | cut -c1-16)...), first $eval_tasks default-dev tasks" > "$summary"
for mode in greedy:0 sampled:1; do
  name=${mode%%:*}
  temperature=${mode##*:}
  "$crl" rollout --llm "http://127.0.0.1:$port" --tokenizer "$tokenizer" --reasoning --split dev \
    --tasks "$eval_tasks" --capacity 1024 --reserve 384 --summary-cap 96 --per-turn-cap 96 --max-compactions 5 \
    --temperature "$temperature" --seed 7 --out "$out/dev-$name.jsonl" > "$out/dev-$name.txt" 2>&1 || {
    echo "train_reasoning_base.sh: crl rollout ($name) failed:" >&2
    cat "$out/dev-$name.txt" >&2
    exit 1
  }
  echo "$name (temperature $temperature):" >> "$summary"
  grep -E '^(early_fact|latest_update|ordered_plan|all) ' "$out/dev-$name.txt" >> "$summary"
done
[ "$trained" = 0 ] || cat "$out/stages.txt" >> "$summary"
mv "$summary" "$out/summary.txt"
cat "$out/summary.txt"
exit 0
}
