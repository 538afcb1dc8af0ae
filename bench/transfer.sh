#!/usr/bin/env bash
# File-transfer goodput, memory and time to first byte: a TRANSFER_BYTES file (default 1 GiB) uploaded by a peer on
# node A for a peer on node B (release builds, loopback, TLS mesh link), against a C pipeline doing the same mandatory
# work, measured on two file systems in one run: the nodes' data directories on disk (under /tmp) and on tmpfs
# (/dev/shm). For each file system, and each direction of the link (below):
#   - the C pipeline (bench/pipeline/pipeline.c, built here with cc against the system OpenSSL): the same curl upload
#     to a C "node A", which writes its spool file and SHA-256s every byte while forwarding it over TLS (OpenSSL's
#     defaults: TLS 1.3, the suite meshgate's nodes negotiate, printed) to a C "node B", which writes the file and
#     SHA-256s it; both fsync; A answers the upload once B's digest matches its own. Goodput from curl's start until
#     curl has that answer: the baseline, what a competent C implementation of the transfer's work reaches here;
#   - meshgate: from the upload's start (curl launched) until the receiving peer's event stream (SSE) delivers
#     `transfer.finished` (the file whole, fsynced, its SHA-256 checked), the goodput ratio meshgate / C, each node's
#     peak RSS (VmHWM) against 64 MiB, and the time to first byte;
#   - time to first byte, for both: from the upload's start until the receiving side's file (meshgate:
#     <B data>/transfers/<id>.in; C: B's file) first has a byte on disk, seen by a poller checking every 0.5 ms
#     (bench/transfer_watch.py, started and ready before the clock starts); target < 100 ms for meshgate.
# Once per file system, a raw TCP copy into a file (python3: sendfile() into a socket, recv_into() + write(), fsync),
# for reference only (no TLS, no hashing, one write). The received files' SHA-256 is compared with the source's.
#   bench/run.sh transfer            (or bench/transfer.sh directly)
# Directions (node B dials node A, as a mesh link has one dialling end): `dialled`, the file goes from A to B, so the
# receiving node reads the link as its WebSocket client; `dialling`, from B to A (the receiver accepted the link). The C
# pipeline mirrors each: its receiving node is the TLS client (`dialled`) or the TLS server (`dialling`).
# Knobs: TRANSFER_BYTES=N (default 1073741824), TRANSFER_FS="disk tmpfs" (either or both), TRANSFER_DIRECTIONS="dialled
# dialling", TRANSFER_TIMEOUT=S (each transfer's bound, default 600 s), MESHGATE_BIN=PATH (skip the build),
# BENCH_SCRATCH=DIR (swift --scratch-path), TRANSFER_PERF=1 (perf record -g each node into $TRANSFER_PERF_DIR),
# TRANSFER_PY_PIPELINE=1 (also the earlier Python pipeline, bench/transfer_pipeline.py: bounded by Python, not a limit).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
SWIFT=${SWIFT:-$(command -v swift || echo /opt/swift/usr/bin/swift)}
BYTES=${TRANSFER_BYTES:-1073741824}
FILESYSTEMS=${TRANSFER_FS:-disk tmpfs}
DIRECTIONS=${TRANSFER_DIRECTIONS:-dialled dialling}
TIMEOUT=${TRANSFER_TIMEOUT:-600}
RSS_LIMIT_KIB=$((64 * 1024))
FIRST_BYTE_LIMIT_MS=100

bash scripts/install-deps.sh bench/packages.txt
source bench/common.sh
bench_setup transfer
PIPELINE=$WORK/pipeline
cc -O2 -Wall -Wextra -o "$PIPELINE" bench/pipeline/pipeline.c -lssl -lcrypto -lpthread

echo "==> transfer: $BYTES bytes, node to node vs a C pipeline doing the same work (loopback); $(uptime)"
head -c "$BYTES" /dev/urandom >"$WORK/source.bin"
expected=$(sha256sum "$WORK/source.bin" | cut -c1-64)
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=bench \
  -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>/dev/null

hwm() { sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$1/status"; }
# value FILE KEY: KEY=VALUE from the file's lines (the last one).
value() { sed -n "s/.*\\b$2=\\([^ ]*\\).*/\\1/p" "$1" | tail -1; }
# ms FROM_NS TO_NS: milliseconds between two CLOCK_REALTIME readings (empty when TO_NS is).
ms() { [[ -n $2 ]] && awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", (b - a) / 1e6 }' || true; }
mibs() { awk -v n="$BYTES" -v s="$1" 'BEGIN { printf "%.1f", n / 1048576 / s }'; }
seconds() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", (b - a) / 1e9 }'; }

# watch_start DIR SUFFIX [PORT TOKEN]: starts bench/transfer_watch.py into $WORK/watch.txt and waits until it is
# ready (its own start-up on a busy machine takes up to 0.5 s: the clock starts after it); sets WATCHER.
watch_start() {
  rm -f "$WORK/watch.ready"
  python3 bench/transfer_watch.py "$1" "$2" "$WORK/watch.ready" "$TIMEOUT" "${@:3}" >"$WORK/watch.txt" &
  WATCHER=$!
  for _ in $(seq 1000); do [[ -e $WORK/watch.ready ]] && break; sleep 0.01; done
  [[ -e $WORK/watch.ready ]] || { echo "the transfer watcher did not start" >&2; exit 1; }
}

# wait_line FILE PATTERN PID: waits (10 s at most) until FILE has a line matching PATTERN, or PID is gone.
wait_line() {
  for _ in $(seq 1000); do
    grep -q "$2" "$1" && return 0
    kill -0 "$3" 2>/dev/null || break
    sleep 0.01
  done
  echo "no '$2' from process $3:" >&2
  cat "$1" "${1%.out}.err" >&2 2>/dev/null || true
  exit 1
}

# c_pipeline ROOT DIRECTION: one transfer through the C pipeline, data under ROOT; sets C_SECONDS, C_FIRST_MS,
# C_OWN_FIRST_MS (B's own clock), C_A_RSS, C_B_RSS (KiB), C_CIPHER.
c_pipeline() {
  local root=$1 direction=$2 a_pid b_pid port http start_ns end_ns status
  rm -rf "$root/c-a" "$root/c-b"
  mkdir -p "$root/c-a" "$root/c-b"
  local common=(--cert "$WORK/cert.pem" --key "$WORK/key.pem" --timeout "$TIMEOUT")
  if [[ $direction == dialled ]]; then
    # The receiving node dialled the link: B is the TLS client.
    "$PIPELINE" relay --file "$root/c-a/spool.bin" --listen "${common[@]}" >"$WORK/c-a.out" 2>"$WORK/c-a.err" &
    a_pid=$!; PIDS+=("$a_pid")
    wait_line "$WORK/c-a.out" '^tls-port=' "$a_pid"
    port=$(value "$WORK/c-a.out" tls-port)
    "$PIPELINE" receive --file "$root/c-b/received.bin" --connect "$port" "${common[@]}" >"$WORK/c-b.out" 2>"$WORK/c-b.err" &
    b_pid=$!; PIDS+=("$b_pid")
  else
    "$PIPELINE" receive --file "$root/c-b/received.bin" --listen "${common[@]}" >"$WORK/c-b.out" 2>"$WORK/c-b.err" &
    b_pid=$!; PIDS+=("$b_pid")
    wait_line "$WORK/c-b.out" '^tls-port=' "$b_pid"
    port=$(value "$WORK/c-b.out" tls-port)
    "$PIPELINE" relay --file "$root/c-a/spool.bin" --connect "$port" "${common[@]}" >"$WORK/c-a.out" 2>"$WORK/c-a.err" &
    a_pid=$!; PIDS+=("$a_pid")
  fi
  wait_line "$WORK/c-a.out" '^ready http-port=' "$a_pid"
  wait_line "$WORK/c-b.out" '^ready' "$b_pid"
  http=$(value "$WORK/c-a.out" http-port)
  watch_start "$root/c-b" .bin
  # The same upload as meshgate's below (the path is ignored).
  start_ns=$(date +%s%N)
  status=$(curl -s --max-time "$TIMEOUT" -o "$WORK/c-answer.json" -w '%{http_code}' -T "$WORK/source.bin" -X POST \
    -H 'Expect:' -H 'content-type: application/octet-stream' "127.0.0.1:$http/api/v1/sessions/s/resources?name=source.bin" || true)
  end_ns=$(date +%s%N)
  for pid in "$a_pid" "$b_pid"; do
    wait "$pid" || { echo "the C pipeline failed:" >&2; cat "$WORK/c-a.err" "$WORK/c-b.err" >&2; exit 1; }
  done
  wait "$WATCHER" || true
  [[ $status == 200 ]] || { echo "the C pipeline answered $status: $(cat "$WORK/c-answer.json")" >&2; exit 1; }
  [[ $(value "$WORK/c-a.out" sha256) == "$expected" && $(value "$WORK/c-b.out" sha256) == "$expected" ]] ||
    { echo "C pipeline SHA-256 mismatch: $(cat "$WORK/c-answer.json")" >&2; exit 1; }
  [[ $(sha256sum "$root/c-b/received.bin" | cut -c1-64) == "$expected" ]] || { echo "C pipeline: B's file differs" >&2; exit 1; }
  C_SECONDS=$(seconds "$start_ns" "$end_ns")
  C_FIRST_MS=$(ms "$start_ns" "$(value "$WORK/watch.txt" first_ns)")
  C_OWN_FIRST_MS=$(ms "$start_ns" "$(value "$WORK/c-b.out" first_write_ns)")
  C_A_RSS=$(value "$WORK/c-a.out" maxrss_kib) C_B_RSS=$(value "$WORK/c-b.out" maxrss_kib)
  C_CIPHER="$(value "$WORK/c-b.out" protocol) $(value "$WORK/c-b.out" cipher)"
  rm -rf "$root/c-a" "$root/c-b"
}

summary=()
failed=0
tls_checked=
for fs in $FILESYSTEMS; do
  case $fs in
    disk) ROOT=$WORK/disk ;;
    tmpfs) ROOT=$(mktemp -d /dev/shm/meshgate-transfer.XXXXXX); CLEANUP_DIRS+=("$ROOT") ;;
    *) echo "TRANSFER_FS: disk or tmpfs, not $fs" >&2; exit 2 ;;
  esac
  mkdir -p "$ROOT"
  echo "--- data on $fs ($(df --output=fstype "$ROOT" | tail -1 | tr -d ' '), $ROOT)"

  # Reference: the same bytes through one loopback TCP connection into a file on this file system (no TLS, no hash).
  tcp_seconds=$(timeout "$TIMEOUT" python3 - "$WORK/source.bin" "$ROOT/tcp-copy.bin" <<'PY'
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
  printf '%-44s %8s MiB/s (%s s)\n' "raw TCP copy into a file (reference):" "$(mibs "$tcp_seconds")" "$tcp_seconds"

  if [[ ${TRANSFER_PY_PIPELINE:-0} == 1 ]]; then
    read -r py_seconds py_digest < <(timeout "$TIMEOUT" python3 bench/transfer_pipeline.py "$WORK/source.bin" \
      "$ROOT/spool.bin" "$ROOT/received.bin" "$WORK/cert.pem" "$WORK/key.pem")
    rm -f "$ROOT/spool.bin" "$ROOT/received.bin"
    [[ $py_digest == "$expected" ]] || { echo "Python pipeline SHA-256 mismatch" >&2; exit 1; }
    printf '%-44s %8s MiB/s (%s s)\n' "Python pipeline (bounded by Python):" "$(mibs "$py_seconds")" "$py_seconds"
  fi

  for direction in $DIRECTIONS; do
    echo "  [$direction: the receiving node $([[ $direction == dialled ]] && echo dialled || echo accepted) the link]"
    # The C pipeline first, then meshgate, seconds apart: the machine's drift moves both.
    c_pipeline "$ROOT" "$direction"
    printf '%-44s %8s MiB/s (%s s); first byte %s ms (B'"'"'s clock %s ms); peak RSS A %s, B %s MiB\n' \
      "C pipeline ($C_CIPHER):" "$(mibs "$C_SECONDS")" "$C_SECONDS" "${C_FIRST_MS:-not seen}" "$C_OWN_FIRST_MS" \
      "$(awk -v k="$C_A_RSS" 'BEGIN { printf "%.1f", k / 1024 }')" "$(awk -v k="$C_B_RSS" 'BEGIN { printf "%.1f", k / 1024 }')"

    NODE_ROOT=$ROOT start_node a
    A_PORT=$PORT A_PID=$PID
    NODE_ROOT=$ROOT start_node b --peer "127.0.0.1:$A_PORT"
    B_PORT=$PORT B_PID=$PID
    for _ in $(seq 100); do
      curl -s "127.0.0.1:$B_PORT/api/v1/mesh/nodes" | grep -q '"state":"linked"' && break
      sleep 0.1
    done
    curl -s "127.0.0.1:$B_PORT/api/v1/mesh/nodes" | grep -q '"encrypted":true' || { echo "the link is not TLS" >&2; exit 1; }
    if [[ -z $tls_checked ]]; then
      # What a dialling node negotiates: its client context is OpenSSL's default for TLS 1.3, like s_client's.
      mg_tls=$(openssl s_client -brief -connect "127.0.0.1:$A_PORT" </dev/null 2>&1 |
        sed -n 's/^Protocol version: //p; s/^Ciphersuite: //p' | tr '\n' ' ' | sed 's/ $//')
      echo "  (meshgate's port negotiates $mg_tls with a default OpenSSL client; the C pipeline $C_CIPHER)"
      [[ $mg_tls == "$C_CIPHER" ]] || echo "  WARNING: the C pipeline's TLS differs from meshgate's" >&2
      tls_checked=1
    fi
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

    # First byte: the receiving node's partial file; end: Bob's event stream says transfer.finished.
    watch_start "$ROOT/$R/data/transfers" .in "$R_PORT" "$BOB"
    perf_pids=()
    if [[ -n ${TRANSFER_PERF:-} ]]; then
      mkdir -p "${TRANSFER_PERF_DIR:=/tmp/meshgate-transfer-perf}"
      perf record -g -o "$TRANSFER_PERF_DIR/$fs-$direction-a.data" -p "$A_PID" 2>/dev/null & perf_pids+=($!)
      perf record -g -o "$TRANSFER_PERF_DIR/$fs-$direction-b.data" -p "$B_PID" 2>/dev/null & perf_pids+=($!)
      sleep 0.5
    fi
    # No `Expect: 100-continue` wait: the body goes out at once (curl would otherwise wait up to 1 s for a 100).
    start_ns=$(date +%s%N)
    ID=$(curl -s --max-time "$TIMEOUT" -T "$WORK/source.bin" -X POST -H 'Expect:' -H "Authorization: Bearer $ALICE" \
      -H 'content-type: application/octet-stream' \
      "127.0.0.1:$S_PORT/api/v1/sessions/$SESSION/resources?to=$BOB_ID&name=source.bin" | json '["transfer"]["id"]')
    upload_ns=$(date +%s%N)
    wait "$WATCHER" || true
    for pid in "${perf_pids[@]}"; do kill -INT "$pid"; wait "$pid" 2>/dev/null || true; done
    end_ns=$(value "$WORK/watch.txt" end_ns)
    state=$(curl -s "127.0.0.1:$R_PORT/api/v1/transfers/$ID" -H "Authorization: Bearer $BOB" | json '["transfer"]["state"]')
    [[ -n $end_ns && $state == finished ]] ||
      { echo "the transfer ended $state ($(cat "$WORK/watch.txt" | tr '\n' ' '))" >&2; exit 1; }
    got=$(sha256sum "$ROOT/$R/data/files/received/$ID/source.bin" | cut -c1-64)
    [[ $expected == "$got" ]] || { echo "SHA-256 mismatch: $expected vs $got" >&2; exit 1; }
    if [[ $S == a ]]; then s_hwm=$(hwm "$A_PID") r_hwm=$(hwm "$B_PID"); else s_hwm=$(hwm "$B_PID") r_hwm=$(hwm "$A_PID"); fi
    kill "$A_PID" "$B_PID"
    wait "$A_PID" "$B_PID" 2>/dev/null || true

    mg_seconds=$(seconds "$start_ns" "$end_ns")
    mg_first=$(ms "$start_ns" "$(value "$WORK/watch.txt" first_ns)")
    ratio_c=$(awk -v c="$C_SECONDS" -v m="$mg_seconds" 'BEGIN { printf "%.2f", c / m }')
    ratio_tcp=$(awk -v t="$tcp_seconds" -v m="$mg_seconds" 'BEGIN { printf "%.2f", t / m }')
    s_mib=$(awk -v k="$s_hwm" 'BEGIN { printf "%.1f", k / 1024 }') r_mib=$(awk -v k="$r_hwm" 'BEGIN { printf "%.1f", k / 1024 }')
    printf '%-44s %8s MiB/s (%s s; upload answered after %s s)\n' "meshgate node to node:" "$(mibs "$mg_seconds")" \
      "$mg_seconds" "$(seconds "$start_ns" "$upload_ns")"
    printf '%-44s %8sx\n' "goodput ratio meshgate / C pipeline:" "$ratio_c"
    printf '%-44s %8sx (reference)\n' "goodput ratio meshgate / raw TCP copy:" "$ratio_tcp"
    printf '%-44s %8s ms (target < %s ms; C pipeline %s ms)\n' "time to first byte on B's disk:" "${mg_first:-not seen}" \
      "$FIRST_BYTE_LIMIT_MS" "${C_FIRST_MS:-not seen}"
    printf '%-44s sender %s MiB, receiver %s MiB (limit %s MiB)\n' "peak RSS (VmHWM):" "$s_mib" "$r_mib" $((RSS_LIMIT_KIB / 1024))
    echo "SHA-256 identical (meshgate, C pipeline)"
    ((s_hwm <= RSS_LIMIT_KIB && r_hwm <= RSS_LIMIT_KIB)) || { echo "peak RSS over the limit" >&2; failed=1; }
    if [[ -z $mg_first ]] || awk -v f="$mg_first" -v l="$FIRST_BYTE_LIMIT_MS" 'BEGIN { exit !(f >= l) }'; then
      echo "time to first byte not under $FIRST_BYTE_LIMIT_MS ms" >&2
      failed=1
    fi
    summary+=("$(printf '%-6s %-9s %9s %9s %7sx %9s %7sx %9s %9s %7s/%-7s' "$fs" "$direction" "$(mibs "$mg_seconds")" \
      "$(mibs "$C_SECONDS")" "$ratio_c" "$(mibs "$tcp_seconds")" "$ratio_tcp" "${mg_first:--}" "${C_FIRST_MS:--}" "$s_mib" "$r_mib")")
    rm -rf "$ROOT/a" "$ROOT/b"
  done
  [[ $fs == tmpfs ]] && rm -rf "$ROOT"
done

echo "--- summary: goodput MiB/s, ratios meshgate / C pipeline and / raw TCP, first byte ms, meshgate peak RSS MiB"
printf '%-6s %-9s %9s %9s %8s %9s %8s %9s %9s %s\n' fs direction meshgate C "mg/C" "raw TCP" "mg/TCP" "1st mg" "1st C" \
  "RSS send/recv"
for row in "${summary[@]}"; do echo "$row"; done
exit "$failed"
