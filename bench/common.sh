# Shared by bench/run.sh, bench/transfer.sh and bench/group-send.sh (sourced, after SWIFT is set).
#
# bench_setup NAME: a work directory (WORK, /tmp/meshgate-NAME.*) and the started processes (PIDS), both removed on
# exit (and every directory a script adds to CLEANUP_DIRS); MESHGATE, the meshgate binary: MESHGATE_BIN, else a release build in BENCH_SCRATCH (default .build).
bench_setup() {
  WORK=$(mktemp -d "/tmp/meshgate-$1.XXXXXX")
  PIDS=()
  CLEANUP_DIRS=()
  trap bench_cleanup EXIT
  if [[ -n ${MESHGATE_BIN:-} ]]; then
    MESHGATE=$MESHGATE_BIN
  else
    local scratch=${BENCH_SCRATCH:-.build}
    echo "==> building meshgate (release, scratch $scratch)"
    "$SWIFT" build -c release --scratch-path "$scratch" --product meshgate >/dev/null
    MESHGATE=$scratch/release/meshgate
  fi
}

bench_cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK" "${CLEANUP_DIRS[@]}"
}

# start_node NAME [ARGS...]: a node on a free loopback port, data in ${NODE_ROOT:-$WORK}/NAME; sets PORT and PID.
start_node() {
  local dir=${NODE_ROOT:-$WORK}/$1
  shift
  mkdir -p "$dir"
  : >"$dir/out.log"
  "$MESHGATE" --port 0 --bind 127.0.0.1 --data-dir "$dir/data" --discovery static --log-level warning "$@" \
    >"$dir/out.log" 2>"$dir/err.log" &
  PID=$!
  PIDS+=("$PID")
  PORT=
  for _ in $(seq 100); do
    PORT=$(sed -n 's/^meshgate ready .*port=\([0-9]*\).*/\1/p' "$dir/out.log")
    [[ -n $PORT ]] && break
    sleep 0.1
  done
  [[ -n $PORT ]] || { echo "meshgate did not start:" >&2; cat "$dir/err.log" >&2; exit 1; }
}

# json EXPR: prints EXPR of the JSON on standard input (e.g. '["peer"]["id"]').
json() { python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }

# peer PORT NAME: creates a peer on the node at PORT; prints the answer (peer and token).
peer() { curl -s -X POST "127.0.0.1:$1/api/v1/peers" -H 'content-type: application/json' -d "{\"displayName\":\"$2\"}"; }

# join_session PORT TOKEN SESSION PEER_ID PEER_PORT PEER_TOKEN: the session's member (TOKEN, on the node at PORT)
# invites PEER_ID, who accepts on its own node (retried while the invitation crosses the mesh).
join_session() {
  local invite
  invite=$(curl -s -X POST "127.0.0.1:$1/api/v1/invitations" -H "Authorization: Bearer $2" \
    -H 'content-type: application/json' -d "{\"to\":\"$4\",\"session\":\"$3\"}" | json '["invitation"]["id"]')
  for _ in $(seq 50); do
    curl -s -X POST "127.0.0.1:$5/api/v1/invitations/$invite/accept" -H "Authorization: Bearer $6" \
      | grep -q '"accepted"' && return 0
    sleep 0.1
  done
}
