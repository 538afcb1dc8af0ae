#!/usr/bin/env bash
# CPU of an idle node that holds 51 open event sockets (bench/RESULTS.md, 2026-12-05).
#   bench/profile/idle-cpu.sh BIN [BIN...]   ROUNDS=2: alternates the binaries, ROUNDS times
# `perf stat -e task-clock` on the node (every thread, also those that end meanwhile) over 20 s in which two messages
# are sent.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
one() {
  start_session_node "$1"
  local w
  wsload_session -m 2 -s 64 --rate 0.04 --window 100000 --label idle --timeout 40 >/dev/null &
  w=$!
  sleep 3
  perf stat -x, -e task-clock -p "$PID" -o "$D/stat" -- sleep 20 >/dev/null 2>&1
  awk -F, -v b="$1" '/task-clock/ {printf "%s: idle with 51 event sockets: %.0f us of CPU per second\n", b, $1 * 1000 / 20}' "$D/stat"
  wait "$w" || true
  stop_node
}
for _ in $(seq "${ROUNDS:-2}"); do
  for bin in "$@"; do one "$bin"; done
done
