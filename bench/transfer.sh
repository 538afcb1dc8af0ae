#!/usr/bin/env bash
# File-transfer goodput, memory and time to first byte: a TRANSFER_BYTES file (default 2 GiB) uploaded by a peer on
# node A for a peer on node B (release builds, loopback, TLS mesh link), measured twice in one run: the nodes' data
# directories on disk (under /tmp) and on tmpfs (/dev/shm). For each file system the same run also measures
#   - a raw TCP copy into a file on that file system (python3: sendfile() into a socket, recv_into() + write(),
#     fsync), the target's baseline;
#   - the physical-limit baseline (bench/transfer_pipeline.py): a minimal three-process pipeline doing the work a
#     transfer must do (client -> A over TCP, A writes and SHA-256s the spool and forwards over TLS, B writes and
#     SHA-256s the file, both fsync);
#   - meshgate: upload start (curl launched) to the receiver's transfer `finished`, the ratio to both baselines, each
#     node's peak RSS (VmHWM) against 64 MiB, and the time to first byte: from the upload's start until the receiving
#     node's partial file (<B data>/transfers/<id>.in) first has a byte, watched every 0.5 ms by a poller.
# The received file's SHA-256 is compared with the source's.
#   bench/run.sh transfer            (or bench/transfer.sh directly)
# Each file system runs both directions of the link (node B dials node A): `dialled`, the file goes from A to B, so
# the receiving node reads the link as its WebSocket client; `dialling`, from B to A (the receiver is the server).
# Knobs: TRANSFER_BYTES=N, TRANSFER_FS="disk tmpfs" (either or both), TRANSFER_DIRECTIONS="dialled dialling", MESHGATE_BIN=PATH (skip the build),
# BENCH_SCRATCH=DIR (swift --scratch-path), TRANSFER_PERF=1 (perf record -g each node into $TRANSFER_PERF_DIR).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
SWIFT=${SWIFT:-$(command -v swift || echo /opt/swift/usr/bin/swift)}
BYTES=${TRANSFER_BYTES:-2147483648}
FILESYSTEMS=${TRANSFER_FS:-disk tmpfs}
DIRECTIONS=${TRANSFER_DIRECTIONS:-dialled dialling}
RSS_LIMIT_KIB=$((64 * 1024))

source bench/common.sh
bench_setup transfer

echo "==> transfer: $BYTES bytes, node to node vs a raw TCP copy and a minimal TLS pipeline (loopback); $(uptime)"
head -c "$BYTES" /dev/urandom >"$WORK/source.bin"
expected=$(sha256sum "$WORK/source.bin" | cut -c1-64)
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=bench \
  -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>/dev/null

hwm() { sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$1/status"; }

failed=0
for fs in $FILESYSTEMS; do
  case $fs in
    disk) ROOT=$WORK/disk ;;
    tmpfs) ROOT=$(mktemp -d /dev/shm/meshgate-transfer.XXXXXX); CLEANUP_DIRS+=("$ROOT") ;;
    *) echo "TRANSFER_FS: disk or tmpfs, not $fs" >&2; exit 2 ;;
  esac
  mkdir -p "$ROOT"
  echo "--- data on $fs ($(df --output=fstype "$ROOT" | tail -1 | tr -d ' '), $ROOT)"

  # Baseline 1: the same bytes through one loopback TCP connection into a file on this file system.
  tcp_seconds=$(python3 - "$WORK/source.bin" "$ROOT/tcp-copy.bin" <<'PY'
import os, socket, sys, threading, time
source, target = sys.argv[1], sys.argv[2]
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(1)
def receive():
    connection, _ = listener.accept()
    buffer = bytearray(1 << 20)
    view = memoryview(buffer)
    with open(target, "wb") as out:
        while True:
            n = connection.recv_into(buffer)
            if n == 0:
                break
            out.write(view[:n])
        out.flush()
        os.fsync(out.fileno())
thread = threading.Thread(target=receive)
thread.start()
start = time.monotonic()
with socket.create_connection(listener.getsockname()) as sender, open(source, "rb") as f:
    sender.sendfile(f)
thread.join()
print(f"{time.monotonic() - start:.3f}")
PY
  )
  rm -f "$ROOT/tcp-copy.bin"

  # Baseline 2: the mandatory work (spool + SHA-256 at A, TLS, file + SHA-256 at B) in a minimal pipeline.
  read -r pipe_seconds pipe_digest < <(python3 bench/transfer_pipeline.py "$WORK/source.bin" "$ROOT/spool.bin" \
    "$ROOT/received.bin" "$WORK/cert.pem" "$WORK/key.pem")
  rm -f "$ROOT/spool.bin" "$ROOT/received.bin"
  [[ $pipe_digest == "$expected" ]] || { echo "pipeline SHA-256 mismatch" >&2; exit 1; }

  python3 - "$BYTES" "$tcp_seconds" "$pipe_seconds" <<'PY'
import sys
size, tcp, pipe = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
mib = 1 << 20
print(f"raw TCP copy into a file:       {size / mib / tcp:8.1f} MiB/s ({tcp:.2f} s)")
print(f"minimal TLS pipeline (limit):   {size / mib / pipe:8.1f} MiB/s ({pipe:.2f} s)")
print(f"ratio TLS pipeline / raw TCP:   {tcp / pipe:8.2f}x")
PY
  for direction in $DIRECTIONS; do
    NODE_ROOT=$ROOT start_node a
    A_PORT=$PORT A_PID=$PID
    NODE_ROOT=$ROOT start_node b --peer "127.0.0.1:$A_PORT"
    B_PORT=$PORT B_PID=$PID
    for _ in $(seq 100); do
      curl -s "127.0.0.1:$B_PORT/api/v1/mesh/nodes" | grep -q '"state":"linked"' && break
      sleep 0.1
    done
    curl -s "127.0.0.1:$B_PORT/api/v1/mesh/nodes" | grep -q '"encrypted":true' || { echo "the link is not TLS" >&2; exit 1; }
    # dialled: data flows from the node that accepted the link to the one that dialled it (the receiver parses the
    # link as its WebSocket client); dialling: from the dialling node to the accepting one.
    if [[ $direction == dialled ]]; then S_PORT=$A_PORT R_PORT=$B_PORT S=a R=b; else S_PORT=$B_PORT R_PORT=$A_PORT S=b R=a; fi
    ALICE=$(peer "$S_PORT" alice | json '["token"]')
    BOB_JSON=$(peer "$R_PORT" bob)
    BOB=$(echo "$BOB_JSON" | json '["token"]')
    BOB_ID=$(echo "$BOB_JSON" | json '["peer"]["id"]')
    SESSION=$(curl -s -X POST "127.0.0.1:$S_PORT/api/v1/sessions" -H "Authorization: Bearer $ALICE" \
      -H 'content-type: application/json' -d '{"encryption":"none"}' | json '["session"]["id"]')
    join_session "$S_PORT" "$ALICE" "$SESSION" "$BOB_ID" "$R_PORT" "$BOB"
    sleep 0.5

    # Time to first byte: the first moment the receiving node's partial file holds a byte (CLOCK_REALTIME ns).
    # The poller says when it runs (its own start-up on a busy machine took up to 0.5 s): the clock starts after that.
    rm -f "$ROOT/ttfb.ready"
    python3 - "$ROOT/$R/data/transfers" "$ROOT/ttfb.ready" >"$ROOT/ttfb.txt" <<'PY' &
import os, sys, time
directory = sys.argv[1]
open(sys.argv[2], "w").close()
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    try:
        for entry in os.scandir(directory):
            if entry.name.endswith(".in") and entry.stat().st_size > 0:
                print(time.time_ns())
                sys.exit(0)
    except FileNotFoundError:
        pass
    time.sleep(0.0005)
PY
    watcher=$!
    for _ in $(seq 500); do [[ -e $ROOT/ttfb.ready ]] && break; sleep 0.01; done
    perf_pids=()
    if [[ -n ${TRANSFER_PERF:-} ]]; then
      mkdir -p "${TRANSFER_PERF_DIR:=/tmp/meshgate-transfer-perf}"
      perf record -g -o "$TRANSFER_PERF_DIR/$fs-$direction-a.data" -p "$A_PID" 2>/dev/null & perf_pids+=($!)
      perf record -g -o "$TRANSFER_PERF_DIR/$fs-$direction-b.data" -p "$B_PID" 2>/dev/null & perf_pids+=($!)
      sleep 0.5
    fi
    # No `Expect: 100-continue` wait: the body goes out at once (curl would otherwise wait up to 1 s for a 100).
    start_ns=$(date +%s%N)
    ID=$(curl -s -T "$WORK/source.bin" -X POST -H 'Expect:' -H "Authorization: Bearer $ALICE" \
      -H 'content-type: application/octet-stream' \
      "127.0.0.1:$S_PORT/api/v1/sessions/$SESSION/resources?to=$BOB_ID&name=source.bin" | json '["transfer"]["id"]')
    upload_ns=$(date +%s%N)
    state=
    for _ in $(seq 12000); do
      state=$(curl -s "127.0.0.1:$R_PORT/api/v1/transfers/$ID" -H "Authorization: Bearer $BOB" | json '["transfer"]["state"]')
      [[ $state == finished || $state == failed || $state == canceled ]] && break
      sleep 0.02
    done
    end_ns=$(date +%s%N)
    for pid in "${perf_pids[@]}"; do kill -INT "$pid"; wait "$pid" 2>/dev/null || true; done
    wait "$watcher" || true
    [[ $state == finished ]] || { echo "the transfer ended $state" >&2; exit 1; }
    got=$(sha256sum "$ROOT/$R/data/files/received/$ID/source.bin" | cut -c1-64)
    [[ $expected == "$got" ]] || { echo "SHA-256 mismatch: $expected vs $got" >&2; exit 1; }
    if [[ $S == a ]]; then s_hwm=$(hwm "$A_PID") r_hwm=$(hwm "$B_PID"); else s_hwm=$(hwm "$B_PID") r_hwm=$(hwm "$A_PID"); fi
    kill "$A_PID" "$B_PID"
    wait "$A_PID" "$B_PID" 2>/dev/null || true

    python3 - "$BYTES" "$tcp_seconds" "$pipe_seconds" "$start_ns" "$upload_ns" "$end_ns" "$(cat "$ROOT/ttfb.txt")" \
      "$s_hwm" "$r_hwm" "$RSS_LIMIT_KIB" "$direction" <<'PY' || failed=1
import sys
size, tcp, pipe = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
start, upload, end, first = (int(x) / 1e9 if x else None for x in sys.argv[4:8])
a, b, limit, direction = int(sys.argv[8]), int(sys.argv[9]), int(sys.argv[10]), sys.argv[11]
mib = 1 << 20
total = end - start
print(f"  [{direction}: the receiving node {'dialled' if direction == 'dialled' else 'accepted'} the link]")
print(f"meshgate node to node:          {size / mib / total:8.1f} MiB/s ({total:.2f} s; upload answered after {upload - start:.2f} s)")
print(f"ratio meshgate / raw TCP:       {tcp / total:8.2f}x (target >= 0.8x)")
print(f"ratio meshgate / TLS pipeline:  {pipe / total:8.2f}x")
print(f"time to first byte:              {(first - start) * 1000:8.1f} ms (target < 100 ms)" if first else "time to first byte: not seen")
print(f"peak RSS (VmHWM): sender {a / 1024:.1f} MiB, receiver {b / 1024:.1f} MiB (limit {limit // 1024} MiB)")
print("SHA-256 identical")
sys.exit(0 if max(a, b) <= limit else 1)
PY
    rm -rf "$ROOT/a" "$ROOT/b"
  done
  [[ $fs == tmpfs ]] && rm -rf "$ROOT"
done
exit "$failed"
