#!/usr/bin/env bash
# CPU per paced broadcast message, thread by thread (bench/RESULTS.md, 2026-12-04).
#   bench/profile/threads.sh BIN      SUBS=50 M=1000: 100 msg/s to SUBS subscribers of one session
#                                     NODE_ARGS="--event-retention 100": extra meshgate arguments
# Prints the load generator's summary, then each node thread's CPU per message over 7 s of the run.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
SUBS=${SUBS:-50} M=${M:-1000}
# shellcheck disable=SC2086 # NODE_ARGS is a list of arguments
start_session_node "$1" ${NODE_ARGS:-}
snap() { for t in /proc/$PID/task/*; do echo "$(basename "$t") $(tr ' ' _ <"$t/comm") $(awk '{print $14+$15}' "$t/stat")"; done; }
(sleep 1.5; snap >"$D/s0"; sleep 7; snap >"$D/s1") &
SP=$!
wsload_session -m "$M" -s 64 --rate 100 --window 100000 --label threads --timeout 30 | grep RESULT
wait $SP
# 7 s at 100 msg/s = 700 messages; clock ticks are 10 ms.
join "$D/s0" "$D/s1" | awk '{d = $5 - $3; if (d > 0) printf "  thread %s %s: %d us per message\n", $1, $2, d * 10000 / 700}'
stop_node
