#!/usr/bin/env bash
# One REST endpoint at ~5 000 req/s with independent pauses (wrk -t2 -c66, 11 ms +/- 50 %), one node, 8 s.
#   bench/profile/rest-post.sh BIN DATA_DIR_BASE LABEL      MODE=POST|GET|HEALTH (default POST /api/v1/jobs)
# NODEPIN / WRKPIN (e.g. "taskset -c 1") pin the node or wrk; DATA_DIR_BASE /dev/shm puts the data on tmpfs.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
start_node "$1" "$2"
token=$(new_token writer)
mode=${MODE:-POST} path=/api/v1/jobs
[[ $mode == HEALTH ]] && { mode=GET; path=/healthz; }
MG_TOKEN=$token MG_METHOD=$mode MG_DELAY_MS=11 MG_JITTER=0.5 ${WRKPIN:-} wrk -t2 -c66 -d8s --latency \
  -s "$REPO/bench/wrk/request.lua" "$BASE$path" >"$D/wrk.txt" 2>&1
python3 "$REPO/bench/wrk_summary.py" "$3" "$D/wrk.txt"
stop_node
