#!/usr/bin/env bash
# Local Slurm check of the sharded sweep (issue 19 item 3): starts slurmctld and slurmd on localhost with a
# throw-away configuration (auth/none and cred/none: no munge; proctrack/linuxproc and task/none: no
# cgroups), submits deploy/slurm/sweep.sbatch for a reduced toy scenario as an array job of 3 shards plus the
# dependent merge job, waits (bounded), and compares summary.json, curves.csv, curves.svg and report.md with a
# single-process `crl run` of the same scenario. Stops the daemons and removes its folder on every exit.
#
# Needs root (the daemons run as root), the Debian package slurm-wlm and a built build/crl.
# Usage: scripts/slurm_check.sh [BUILD_DIR]    (exit 0 pass, 1 fail, 77 skipped: no slurm / not root)
# Environment: CRL_SLURM_TIMEOUT (seconds for the sweep, default 100), CRL_SLURM_PORT (slurmctld's port,
# default 16817; slurmd uses the next one).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${1:-build}
case $build in /*) crl=$build/crl ;; *) crl=$root/$build/crl ;; esac
timeout_s=${CRL_SLURM_TIMEOUT:-100}
port=${CRL_SLURM_PORT:-16817}

for tool in slurmctld slurmd sbatch scontrol; do
  if ! command -v "$tool" >/dev/null; then
    echo "slurm_check: SKIPPED: $tool not found (apt-get install -y slurm-wlm)" >&2
    exit 77
  fi
done
if [ "$(id -u)" != 0 ]; then
  echo "slurm_check: SKIPPED: needs root (slurmctld and slurmd run as root with auth/none)" >&2
  exit 77
fi
[ -x "$crl" ] || { echo "slurm_check: FAIL: no $crl (build first: scripts/build.sh)" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/crl_slurm_check.XXXXXX")
pids=()
cleanup() {
  # Jobs still queued or running are cancelled first, so that no job step outlives the daemons (bounded).
  if [ ${#pids[@]} -gt 0 ] && [ -n "$(squeue -h 2>/dev/null)" ]; then
    scancel --full --partition=check 2>/dev/null || true
    for _ in $(seq 50); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.2; done
  fi
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "slurm_check: FAIL: $*" >&2
  for log in "$tmp"/slurmctld.log "$tmp"/slurmd.log "$tmp"/out/slurm-*.out; do
    [ -f "$log" ] && { echo "--- $log (tail)" >&2; tail -n 20 "$log" >&2; }
  done
  exit 1
}

mkdir -p "$tmp/state" "$tmp/spool"
cat > "$tmp/slurm.conf" <<CONF
ClusterName=crlcheck
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/none
CredType=cred/none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=check Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$tmp/slurm.conf

# The toy scenario (2 arms x 3 seeds) cut to seconds.
sed 's/training { episodes: 1000 batch_size: 16 eval_episodes: 2000 eval_interval: 100 curve_eval_episodes: 500 }/training { episodes: 64 batch_size: 16 eval_episodes: 200 eval_interval: 32 curve_eval_episodes: 50 }/' \
  scenarios/toy.pbtxt > "$tmp/toy.pbtxt"
grep -q "episodes: 64 " "$tmp/toy.pbtxt" || fail "could not reduce scenarios/toy.pbtxt"

start=$(date +%s)
cd "$tmp"
# The reference: one process, into the folder the sweep writes later (the report names its --out).
"$crl" run toy.pbtxt --out out > /dev/null || fail "single-process crl run failed"
mkdir ref && mv out/summary.json out/curves.csv out/curves.svg out/report.md ref/ && rm -rf out

slurmctld -D -c -f "$SLURM_CONF" > "$tmp/slurmctld.stdout" 2>&1 &
pids+=($!)
slurmd -D -N localhost -f "$SLURM_CONF" > "$tmp/slurmd.stdout" 2>&1 &
pids+=($!)
deadline=$(($(date +%s) + timeout_s))
until scontrol show node localhost 2>/dev/null | grep -Eq "State=(IDLE|MIXED|ALLOCATED)"; do
  [ "$(date +%s)" -lt "$deadline" ] || fail "the node did not come up within ${timeout_s} s"
  kill -0 "${pids[0]}" 2>/dev/null || fail "slurmctld exited"
  kill -0 "${pids[1]}" 2>/dev/null || fail "slurmd exited"
  sleep 0.5
done

ids=$(CRL="$crl" "$root/deploy/slurm/sweep.sbatch" toy.pbtxt out 3) || fail "submission failed"
read -r array merge <<< "$ids"
echo "slurm_check: array job $array (3 shards), merge job $merge"
state=""
while :; do
  state=$(scontrol show job "$merge" 2>/dev/null | grep -o "JobState=[A-Z_]*" | cut -d= -f2 || true)
  case "$state" in
    COMPLETED) break ;;
    FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE)
      fail "merge job $merge ended $state" ;;
  esac
  [ "$(date +%s)" -lt "$deadline" ] || { scancel "$array" "$merge" 2>/dev/null || true; fail "the sweep did not finish within ${timeout_s} s (merge job state: ${state:-unknown})"; }
  sleep 0.5
done
for f in summary.json curves.csv curves.svg report.md; do
  cmp -s "ref/$f" "out/$f" || { diff "ref/$f" "out/$f" | head -20 >&2; fail "out/$f differs from the single-process run"; }
done
echo "slurm_check: PASS: the Slurm sweep (3 shards + merge) wrote the single-process bytes in $(($(date +%s) - start)) s"
