#!/usr/bin/env bash
# Node CPU per paced broadcast message, measured by the kernel (bench/RESULTS.md, 2026-12-05).
#   bench/profile/paced-cpu.sh BIN [BIN...]   ROUNDS=3: alternates the binaries, ROUNDS times
# Each run: 100 msg/s to 50 subscribers of one session, 1 000 messages; `perf stat -e task-clock` on the node for 7 s
# of it (700 messages), so the figure has microsecond resolution (wsload's comes from /proc ticks of 10 ms).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
one() {
  start_session_node "$1"
  local p99
  (sleep 1.5; perf stat -x, -e task-clock -p "$PID" -o "$D/stat" -- sleep 7 >/dev/null 2>&1) &
  local sp=$!
  p99=$(wsload_session -m 1000 -s 64 --rate 100 --window 100000 --label paced-cpu --timeout 30 |
    sed -n 's/.* p99_ms=\([^ ]*\).*/\1/p')
  wait "$sp"
  awk -F, -v b="$1" -v p="$p99" '/task-clock/ {printf "%s: %.0f us of node CPU per paced message, p99 %s ms\n", b, $1 * 1000 / 700, p}' "$D/stat"
  stop_node
}
for _ in $(seq "${ROUNDS:-3}"); do
  for bin in "$@"; do one "$bin"; done
done
