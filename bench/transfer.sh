#!/usr/bin/env bash
# File-transfer goodput and memory: a TRANSFER_BYTES file (default 2 GiB) sent from a peer on node A to a peer on
# node B (both release builds, loopback), against a raw TCP copy of the same file on loopback in the same run
# (python3: sendfile() into a socket, recv_into() + write() to a file on the other end). Prints both rates, their
# ratio, and each node's peak RSS (VmHWM), which must stay under 100 MiB whatever the size.
#   bench/run.sh transfer            (or bench/transfer.sh directly)
# Knobs: TRANSFER_BYTES=N, MESHGATE_BIN=PATH (skip the build), BENCH_SCRATCH=DIR (swift --scratch-path).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
SWIFT=${SWIFT:-$(command -v swift || echo /opt/swift/usr/bin/swift)}
BYTES=${TRANSFER_BYTES:-2147483648}

source bench/common.sh
bench_setup transfer

echo "==> transfer: $BYTES bytes, node to node vs a raw TCP copy (loopback)"
head -c "$BYTES" /dev/urandom >"$WORK/source.bin"

# Baseline: the same bytes through one loopback TCP connection into a file.
python3 - "$WORK/source.bin" "$WORK/tcp-copy.bin" <<'PY' >"$WORK/tcp.txt"
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
tcp_seconds=$(cat "$WORK/tcp.txt")
rm -f "$WORK/tcp-copy.bin"

start_node a
A_PORT=$PORT A_PID=$PID
start_node b --peer "127.0.0.1:$A_PORT"
B_PORT=$PORT B_PID=$PID
for _ in $(seq 100); do
  curl -s "127.0.0.1:$B_PORT/api/v1/mesh/nodes" | grep -q '"state":"linked"' && break
  sleep 0.1
done

json() { python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }
peer() { curl -s -X POST "127.0.0.1:$1/api/v1/peers" -H 'content-type: application/json' -d "{\"displayName\":\"$2\"}"; }
ALICE=$(peer "$A_PORT" alice | json '["token"]')
BOB_JSON=$(peer "$B_PORT" bob)
BOB=$(echo "$BOB_JSON" | json '["token"]')
BOB_ID=$(echo "$BOB_JSON" | json '["peer"]["id"]')
SESSION=$(curl -s -X POST "127.0.0.1:$A_PORT/api/v1/sessions" -H "Authorization: Bearer $ALICE" \
  -H 'content-type: application/json' -d '{"encryption":"none"}' | json '["session"]["id"]')
INVITE=$(curl -s -X POST "127.0.0.1:$A_PORT/api/v1/invitations" -H "Authorization: Bearer $ALICE" \
  -H 'content-type: application/json' -d "{\"to\":\"$BOB_ID\",\"session\":\"$SESSION\"}" | json '["invitation"]["id"]')
for _ in $(seq 50); do
  curl -s -X POST "127.0.0.1:$B_PORT/api/v1/invitations/$INVITE/accept" -H "Authorization: Bearer $BOB" \
    | grep -q '"accepted"' && break
  sleep 0.1
done
sleep 0.5

start_ns=$(date +%s%N)
ID=$(curl -s -T "$WORK/source.bin" -X POST -H "Authorization: Bearer $ALICE" -H 'content-type: application/octet-stream' \
  "127.0.0.1:$A_PORT/api/v1/sessions/$SESSION/resources?to=$BOB_ID&name=source.bin" | json '["transfer"]["id"]')
upload_ns=$(date +%s%N)
state=
for _ in $(seq 6000); do
  state=$(curl -s "127.0.0.1:$B_PORT/api/v1/transfers/$ID" -H "Authorization: Bearer $BOB" | json '["transfer"]["state"]')
  [[ $state == finished || $state == failed || $state == canceled ]] && break
  sleep 0.05
done
end_ns=$(date +%s%N)
[[ $state == finished ]] || { echo "the transfer ended $state" >&2; exit 1; }

expected=$(sha256sum "$WORK/source.bin" | cut -c1-64)
got=$(sha256sum "$WORK/b/data/files/received/$ID/source.bin" | cut -c1-64)
[[ $expected == "$got" ]] || { echo "SHA-256 mismatch: $expected vs $got" >&2; exit 1; }

hwm() { sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$1/status"; }
python3 - "$BYTES" "$tcp_seconds" "$start_ns" "$upload_ns" "$end_ns" "$(hwm "$A_PID")" "$(hwm "$B_PID")" <<'PY'
import sys
size, tcp = int(sys.argv[1]), float(sys.argv[2])
start, upload, end = (int(x) / 1e9 for x in sys.argv[3:6])
a, b = int(sys.argv[6]), int(sys.argv[7])
mib = 1 << 20
total = end - start
print(f"raw TCP copy on loopback:     {size / mib / tcp:8.1f} MiB/s ({tcp:.2f} s)")
print(f"meshgate node to node:        {size / mib / total:8.1f} MiB/s ({total:.2f} s; upload answered after {upload - start:.2f} s)")
print(f"ratio meshgate / raw TCP:     {tcp / total:8.2f}x")
print(f"peak RSS (VmHWM): sender {a / 1024:.1f} MiB, receiver {b / 1024:.1f} MiB (limit 100 MiB)")
print("SHA-256 identical")
sys.exit(0 if max(a, b) < 100 * 1024 else 1)
PY
