#!/usr/bin/env bash
# Node CPU per paced broadcast message in "send units" (bench/RESULTS.md, 2026-12-05).
#   bench/profile/send-units.sh BIN [BIN...]      ROUNDS=1: alternates the binaries, ROUNDS times
#   bench/profile/send-units.sh --c                 the same for the C mirror (libwebsockets-test-server)
# Each run: 100 msg/s to 50 subscribers, `perf record -F 2999 --call-graph dwarf` for 7 s of it, then the node's
# samples divided by the samples spent in `send`. Every server makes the same 51 sends per message at about the same
# cost per send, so the figure compares servers and builds with less of the machine's drift than CPU time does
# (not none: compare builds within one batch). Also prints where the rest goes, in the same units.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
record() { perf record -F 2999 --call-graph dwarf,16384 -p "$1" -o "$2" -- sleep 7 >/dev/null 2>&1; }
report() {
  perf script -i "$2" -F comm,tid,period,ip,sym --no-demangle 2>/dev/null | python3 "$REPO/bench/profile/send_units.py" "$1"
}
one() {
  if [[ $1 == --c ]]; then
    local port
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    D=$(mktemp -d /tmp/mgprof.XXXX)
    libwebsockets-test-server --port "$port" --interface lo >"$D/c.log" 2>&1 &
    PID=$!
    sleep 0.5
    (sleep 1.5; record "$PID" "$D/perf.data") &
    local sp=$!
    timeout 60 "$WSLOAD" --sub-url "ws://127.0.0.1:$port/" -n 50 --protocol lws-mirror-protocol -m 1000 -s 64 \
      --rate 100 --window 100000 --server-pid "$PID" --label send-units --timeout 30 >/dev/null
    wait "$sp"
    report "C mirror" "$D/perf.data"
    stop_node
  else
    start_session_node "$1"
    (sleep 1.5; record "$PID" "$D/perf.data") &
    local sp=$!
    wsload_session -m 1000 -s 64 --rate 100 --window 100000 --label send-units --timeout 30 >/dev/null
    wait "$sp"
    report "$1" "$D/perf.data"
    stop_node
  fi
}
for _ in $(seq "${ROUNDS:-1}"); do
  for bin in "$@"; do one "$bin"; done
done
