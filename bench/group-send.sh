#!/usr/bin/env bash
# Group send vs single sends: one GROUP_BYTES file (default 32 MiB) from a peer on node A to 30 recipients, 10 on
# each of nodes A, B and C (release builds, loopback): once as ONE group send (?to=all), once as 30 single sends
# started together. Prints wall time (upload to every recipient finished) and the file bytes sent over the mesh
# (meshgate_mesh_payload_bytes_total on node A) of each, and their ratios. A group send should move the file once per
# receiving node (2×) where single sends move it once per remote recipient (20×).
#   bench/run.sh group-send          (or bench/group-send.sh directly)
# Knobs: GROUP_BYTES=N, GROUP_PER_NODE=10, MESHGATE_BIN=PATH (skip the build), BENCH_SCRATCH=DIR.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
SWIFT=${SWIFT:-$(command -v swift || echo /opt/swift/usr/bin/swift)}
BYTES=${GROUP_BYTES:-33554432}
PER_NODE=${GROUP_PER_NODE:-10}

source bench/common.sh
bench_setup group
# The set-up creates 3 × GROUP_PER_NODE peers from one address as fast as it can.
start() { start_node "$@" --peer-create-rate 0; }

echo "==> group-send: $BYTES bytes to $((3 * PER_NODE)) recipients on 3 nodes, one group send vs single sends"
head -c "$BYTES" /dev/urandom >"$WORK/source.bin"
start a
A=$PORT
start b --peer "127.0.0.1:$A"
B=$PORT
start c --peer "127.0.0.1:$A" --peer "127.0.0.1:$B"
C=$PORT
for port in $A $B $C; do
  for _ in $(seq 100); do
    [[ $(curl -s "127.0.0.1:$port/api/v1/mesh/nodes" | grep -o '"state":"linked"' | wc -l) -ge 2 ]] && break
    sleep 0.1
  done
done

SENDER=$(peer "$A" sender | json '["token"]')
SESSION=$(curl -s -X POST "127.0.0.1:$A/api/v1/sessions" -H "Authorization: Bearer $SENDER" \
  -H 'content-type: application/json' -d '{"encryption":"none","maxPeers":64}' | json '["session"]["id"]')
IDS=() TOKENS=() PORTS=()
for port in $A $B $C; do
  for n in $(seq "$PER_NODE"); do
    created=$(peer "$port" "r$port-$n")
    id=$(echo "$created" | json '["peer"]["id"]')
    token=$(echo "$created" | json '["token"]')
    join_session "$A" "$SENDER" "$SESSION" "$id" "$port" "$token"
    IDS+=("$id") TOKENS+=("$token") PORTS+=("$port")
  done
done
sleep 1

mesh_bytes() {
  curl -s "127.0.0.1:$A/metrics" | awk '/^meshgate_mesh_payload_bytes_total\{/ { sum += $2 } END { printf "%d\n", sum }'
}
# wait_all IDS...: until every recipient's transfer (same order as IDS/TOKENS/PORTS) is finished.
wait_all() {
  local ids=("$@") i state
  for i in "${!ids[@]}"; do
    for _ in $(seq 12000); do
      state=$(curl -s "127.0.0.1:${PORTS[$i]}/api/v1/transfers/${ids[$i]}" -H "Authorization: Bearer ${TOKENS[$i]}" \
        | json '["transfer"]["state"]' 2>/dev/null || true)
      [[ $state == finished ]] && break
      [[ $state == failed || $state == canceled ]] && { echo "transfer ${ids[$i]} ended $state" >&2; exit 1; }
      sleep 0.05
    done
  done
}

# One group send.
before=$(mesh_bytes)
start_ns=$(date +%s%N)
answer=$(curl -s -T "$WORK/source.bin" -X POST -H "Authorization: Bearer $SENDER" \
  -H 'content-type: application/octet-stream' "127.0.0.1:$A/api/v1/sessions/$SESSION/resources?to=all&name=g.bin")
GROUP_IDS=()
for id in "${IDS[@]}"; do
  GROUP_IDS+=("$(echo "$answer" | python3 -c "import json,sys; print(next(t['id'] for t in json.load(sys.stdin)['transfers'] if t['to']['id'] == '$id'))")")
done
wait_all "${GROUP_IDS[@]}"
group_seconds=$(( ($(date +%s%N) - start_ns) / 1000000 ))
group_bytes=$(( $(mesh_bytes) - before ))

# One single send per recipient, started together.
before=$(mesh_bytes)
start_ns=$(date +%s%N)
UPLOADS=()
for i in "${!IDS[@]}"; do
  curl -s -T "$WORK/source.bin" -X POST -H "Authorization: Bearer $SENDER" -H 'content-type: application/octet-stream' \
    "127.0.0.1:$A/api/v1/sessions/$SESSION/resources?to=${IDS[$i]}&name=s$i.bin" >"$WORK/single-$i.json" &
  UPLOADS+=("$!")
done
wait "${UPLOADS[@]}"  # the uploads only (a bare wait would wait for the nodes too)
SINGLE_IDS=()
for i in "${!IDS[@]}"; do SINGLE_IDS+=("$(json '["transfer"]["id"]' <"$WORK/single-$i.json")"); done
wait_all "${SINGLE_IDS[@]}"
single_seconds=$(( ($(date +%s%N) - start_ns) / 1000000 ))
single_bytes=$(( $(mesh_bytes) - before ))

python3 - "$BYTES" "$group_seconds" "$group_bytes" "$single_seconds" "$single_bytes" "${#SINGLE_IDS[@]}" <<'PY'
import sys
size, gs, gb, ss, sb, n = (int(x) for x in sys.argv[1:7])
mib = 1 << 20
print(f"group send:       {gs / 1000:7.2f} s, {gb / mib:8.1f} MiB over the mesh ({gb / size:.2f}x the file)")
print(f"{n} single sends:  {ss / 1000:7.2f} s, {sb / mib:8.1f} MiB over the mesh ({sb / size:.2f}x the file)")
print(f"ratio single / group: wall time {ss / max(gs, 1):.2f}x, mesh bytes {sb / max(gb, 1):.2f}x")
PY
