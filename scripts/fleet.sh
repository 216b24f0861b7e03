#!/usr/bin/env bash
# A local fleet for trying `crl serve` behind HAProxy (deploy/README.md):
#   scripts/fleet.sh up N     starts N backends (tags b0 .. bN-1, ports BASE+1 ..) and HAProxy on BASE
#   scripts/fleet.sh down     stops them (the pids recorded by `up`)
#   scripts/fleet.sh status   lists them
# Environment: CRL_BIN (default build/crl), FLEET_DIR (default .fleet: pids, logs, haproxy.cfg), FLEET_PORT
# (default 7400: HAProxy; backends on 7401 ..), FLEET_STATS_PORT (default 8404: HAProxy's /metrics, /stats).
# CRL_SNAPSHOT_DIR: a folder shared by the backends (crl serve --snapshot-dir, with --snapshot-every
# $CRL_SNAPSHOT_EVERY, default 8) and HAProxy configured with --snapshots (failover by restore; deploy/README.md).
# Loopback only. Waits are bounded (10 s per process).
set -euo pipefail
cd "$(dirname "$0")/.."
crl=${CRL_BIN:-build/crl}
dir=${FLEET_DIR:-.fleet}
base=${FLEET_PORT:-7400}
stats=${FLEET_STATS_PORT:-8404}
snapshots=()
deploy_snapshots=()
if [ -n "${CRL_SNAPSHOT_DIR:-}" ]; then
  snapshots=(--snapshot-dir "$CRL_SNAPSHOT_DIR" --snapshot-every "${CRL_SNAPSHOT_EVERY:-8}")
  deploy_snapshots=(--snapshots)
fi

wait_http() {  # URL: waits up to 10 s for a 200
  for _ in $(seq 100); do
    if python3 - "$1" <<'PY' 2>/dev/null; then return 0; fi
import sys, urllib.request
sys.exit(0 if urllib.request.urlopen(sys.argv[1], timeout=1).status == 200 else 1)
PY
    sleep 0.1
  done
  echo "fleet: $1 did not answer within 10 s" >&2
  return 1
}

down() {
  [ -d "$dir" ] || { echo "fleet: nothing to stop ($dir absent)"; return 0; }
  for pidfile in "$dir"/*.pid; do
    [ -e "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid"
      for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    fi
    rm -f "$pidfile"
  done
  echo "fleet: stopped"
}

up() {
  local n=$1
  [[ "$n" =~ ^[1-9][0-9]?$ ]] || { echo "fleet: N must be 1 .. 99, not '$n'" >&2; exit 2; }
  command -v haproxy >/dev/null || { echo "fleet: haproxy is absent (apt-get install haproxy)" >&2; exit 1; }
  [ -x "$crl" ] || { echo "fleet: $crl is not built (scripts/build.sh)" >&2; exit 1; }
  mkdir -p "$dir"
  ls "$dir"/*.pid >/dev/null 2>&1 && { echo "fleet: already up (scripts/fleet.sh down first)" >&2; exit 1; }
  local backends=()
  for ((i = 0; i < n; i++)); do
    local port=$((base + 1 + i))
    "$crl" serve --host 127.0.0.1 --port "$port" --backend-tag "b$i" "${snapshots[@]}" >"$dir/b$i.log" 2>&1 &
    echo $! >"$dir/b$i.pid"
    backends+=(--backend "b$i=127.0.0.1:$port")
  done
  for ((i = 0; i < n; i++)); do wait_http "http://127.0.0.1:$((base + 1 + i))/health" || { down; exit 1; }; done
  "$crl" deploy haproxy --bind "127.0.0.1:$base" --stats-bind "127.0.0.1:$stats" "${backends[@]}" "${deploy_snapshots[@]}" >"$dir/haproxy.cfg"
  haproxy -c -q -f "$dir/haproxy.cfg"
  haproxy -db -f "$dir/haproxy.cfg" >"$dir/haproxy.log" 2>&1 &
  echo $! >"$dir/haproxy.pid"
  wait_http "http://127.0.0.1:$base/health" || { down; exit 1; }
  echo "fleet: $n backends behind http://127.0.0.1:$base (HAProxy metrics: http://127.0.0.1:$stats/metrics," \
    "stats: /stats; backend metrics: http://127.0.0.1:$((base + 1))/metrics); logs in $dir/"
}

case "${1:-}" in
  up) up "${2:-3}" ;;
  down) down ;;
  status)
    for pidfile in "$dir"/*.pid; do
      [ -e "$pidfile" ] || { echo "fleet: down"; exit 0; }
      name=$(basename "$pidfile" .pid); pid=$(cat "$pidfile")
      kill -0 "$pid" 2>/dev/null && echo "$name: running (pid $pid)" || echo "$name: gone (pid $pid)"
    done ;;
  *) echo "usage: scripts/fleet.sh up N | down | status" >&2; exit 2 ;;
esac
