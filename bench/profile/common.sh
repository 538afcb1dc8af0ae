# Shared by the profiling helpers in bench/profile: one meshgate node on loopback with a fresh data directory.
# start_node BIN DIRBASE [extra meshgate args...]: sets PID, PORT, BASE, D (the node's scratch directory).
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
WSLOAD=${WSLOAD:-/tmp/meshgate-wsload}
[[ -x $WSLOAD ]] || gcc -O2 -o "$WSLOAD" "$REPO/bench/wsload/wsload.c"
start_node() {
  local bin=$1 dirbase=$2; shift 2
  D=$(mktemp -d "$dirbase/mgprof.XXXX")
  ${NODEPIN:-} "$bin" --port 0 --bind 127.0.0.1 --data-dir "$D/data" --discovery static --log-level warning \
    --peer-create-rate 0 --max-peers 50000 "$@" >"$D/out.log" 2>"$D/err.log" &
  PID=$!
  for _ in $(seq 100); do
    PORT=$(sed -n 's/^meshgate ready .*port=\([0-9]*\).*/\1/p' "$D/out.log")
    [[ -n $PORT ]] && break
    sleep 0.1
  done
  BASE=http://127.0.0.1:$PORT
}
stop_node() { kill "$PID"; wait "$PID" 2>/dev/null; rm -rf "$D"; }
new_token() {
  curl -sf -X POST -H 'Content-Type: application/json' -d "{\"displayName\":\"$1\"}" "$BASE/api/v1/peers" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])'
}
# start_session_node BIN [extra meshgate args...]: start_node in /tmp, then SUBS (default 50) peers in one session
# (bench/mg_setup.py); sets SID besides PID, PORT, BASE and D.
start_session_node() {
  start_node "$1" /tmp "${@:2}"
  python3 "$REPO/bench/mg_setup.py" --base "$BASE" -n "${SUBS:-50}" --out "$D/mg" >/dev/null
  SID=$(cat "$D/mg/session")
}
# wsload_session ARGS...: bench/wsload against that session (its subscribers and publisher, `{"op":"send"}` frames).
wsload_session() {
  timeout 60 "$WSLOAD" --sub-urls "$D/mg/subs.txt" --pub-url "$(cat "$D/mg/pub.txt")" --ready-first \
    --server-pid "$PID" --template '{"op":"send","session":"'"$SID"'","mode":"reliable","text":"%s"}' "$@"
}
