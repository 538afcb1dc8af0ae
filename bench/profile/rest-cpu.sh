#!/usr/bin/env bash
# Node CPU per request in a closed loop (wrk -t1 -c16, 5 s), with a perf profile of 3 s of it.
#   bench/profile/rest-cpu.sh BIN OUT.perf [PATH]     METHOD=GET|POST (default GET /healthz)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
start_node "$1" /dev/shm
token=$(new_token writer)
for i in $(seq 20); do
  curl -sf -o /dev/null -X POST -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
    -d "{\"name\":\"job $i\",\"payment\":12.5,\"notes\":\"bench\"}" "$BASE/api/v1/jobs"
done
(sleep 1; perf record -F 4999 -g -p "$PID" -o "$2" -- sleep 3 >/dev/null 2>&1) &
PP=$!
before=$(awk '{print $14+$15}' "/proc/$PID/stat")
MG_TOKEN=$token MG_METHOD=${METHOD:-GET} MG_DELAY_MS=0 MG_JITTER=0 wrk -t1 -c16 -d5s --latency \
  -s "$REPO/bench/wrk/request.lua" "$BASE${3:-/healthz}" >"$D/wrk.txt" 2>&1
after=$(awk '{print $14+$15}' "/proc/$PID/stat")
python3 "$REPO/bench/wrk_summary.py" closed "$D/wrk.txt"
requests=$(grep -o '[0-9]* requests in' "$D/wrk.txt" | awk '{print $1}')
echo "node CPU per request: $(( (after - before) * 10000 / requests )) us"
wait $PP
stop_node
