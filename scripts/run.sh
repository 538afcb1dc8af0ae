#!/usr/bin/env bash
# Starts a meshgate node from .build/release/meshgate (used by `make run`), waits until it is
# ready, creates a first peer and prints the dashboard URL, the peer's token and example curl
# commands. Then it waits for the node; Ctrl-C / SIGTERM stop it gracefully and the node's exit
# code becomes this script's exit code.
#
#   scripts/run.sh [meshgate args...]
#   RUN_ARGS="--port 9000 --name lab" scripts/run.sh
#   MESHGATE_PORT=0 MESHGATE_LOG_LEVEL=debug scripts/run.sh
#
# MESHGATE_* variables reach the node unchanged. MESHGATE_BIN overrides the binary;
# MESHGATE_READY_TIMEOUT (seconds, default 60) bounds the wait for the ready line.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
me=run.sh

bin=${MESHGATE_BIN:-$root/.build/release/meshgate}
if [[ ! -x $bin ]]; then
  echo "$me: $bin not found or not executable; build it with 'make build' (or use 'make run')." >&2
  exit 1
fi

read -r -a run_args <<<"${RUN_ARGS:-}"
args=("${run_args[@]}" "$@")

# The bind address decides whether LAN addresses are worth printing.
bind=${MESHGATE_BIND:-0.0.0.0}
for ((i = 0; i < ${#args[@]}; i++)); do
  case ${args[i]} in
    --bind) if ((i + 1 < ${#args[@]})); then bind=${args[i + 1]}; fi ;;
    --bind=*) bind=${args[i]#--bind=} ;;
  esac
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/meshgate-run.XXXXXX")
server_pid=
tee_pid=
got_signal=

# shellcheck disable=SC2317 # cleanup and forward run from traps
cleanup() {
  if [[ -n $server_pid ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# shellcheck disable=SC2317
forward() {
  got_signal=$1
  if [[ -n $server_pid ]]; then
    kill -s "$1" "$server_pid" 2>/dev/null || true
  fi
}
trap 'forward INT' INT
trap 'forward TERM' TERM
trap 'forward HUP' HUP

# The node's stdout goes through a FIFO into tee: the user sees it and we can look for the ready
# line. stderr (the logfmt logs) goes straight to the terminal. The node runs in its own session
# so a Ctrl-C in the terminal reaches it exactly once, forwarded by the trap above.
mkfifo "$tmp/stdout"
tee -i "$tmp/stdout.log" <"$tmp/stdout" &
tee_pid=$!
launch=()
command -v setsid >/dev/null 2>&1 && launch+=(setsid)
command -v stdbuf >/dev/null 2>&1 && launch+=(stdbuf -oL)
"${launch[@]}" "$bin" "${args[@]}" >"$tmp/stdout" &
server_pid=$!

# Waits for the node to exit and sets `rc` to its exit code, riding out the interruptions of
# `wait` by the signals we forward.
wait_for_server() {
  local status
  while :; do
    got_signal=
    if wait "$server_pid"; then status=0; else status=$?; fi
    if [[ -z $got_signal ]]; then break; fi
    kill -0 "$server_pid" 2>/dev/null && continue
    # The signal arrived as the node exited: ask once more for its real status.
    if wait "$server_pid" 2>/dev/null; then status=0; else
      local again=$?
      ((again == 127)) || status=$again
    fi
    break
  done
  rc=$status
  # tee ends when the node closes its stdout; give it a moment to flush, then stop it.
  for _ in {1..20}; do
    kill -0 "$tee_pid" 2>/dev/null || break
    sleep 0.05
  done
  kill "$tee_pid" 2>/dev/null || true
  wait "$tee_pid" 2>/dev/null || true
}

timeout=${MESHGATE_READY_TIMEOUT:-60}
deadline=$((SECONDS + timeout))
ready=
stopping=
while :; do
  ready=$(grep -m1 '^meshgate ready ' "$tmp/stdout.log" 2>/dev/null || true)
  [[ -n $ready ]] && break
  if [[ -n $got_signal ]]; then stopping=1; fi
  if ! kill -0 "$server_pid" 2>/dev/null; then
    wait_for_server
    if [[ -n $stopping ]]; then
      echo "$me: meshgate stopped before it was ready (exit code $rc)" >&2
    else
      echo "$me: meshgate exited before it was ready, exit code $rc" >&2
    fi
    server_pid=
    exit "$rc"
  fi
  if ((SECONDS >= deadline)); then
    echo "$me: meshgate did not print its ready line within ${timeout}s; stopping it" >&2
    kill -TERM "$server_pid" 2>/dev/null || true
    wait_for_server
    server_pid=
    exit 1
  fi
  sleep 0.1
done

field() { # field NAME: the value of NAME=... in the ready line
  sed -n "s/.*[[:space:]]$1=\([^[:space:]]*\).*/\1/p" <<<"$ready"
}
port=$(field port)
# Printed only on the node's first start (a new data directory); only its hash is kept.
admin_token=$(sed -n 's/^meshgate admin-token=\([^[:space:]]*\).*/\1/p' "$tmp/stdout.log" | head -1)
url=$(field url)
node_id=$(field node.id)
data_dir=$(field data.dir)
[[ -n $url ]] || url="http://127.0.0.1:$port/"
url=${url%/}/

# Create the first peer.
peer_id=
token=
if response=$(curl -fsS -X POST "${url}api/v1/peers" \
  -H 'content-type: application/json' -d '{"displayName":"first-peer"}' 2>"$tmp/curl.err"); then
  if command -v python3 >/dev/null 2>&1; then
    parsed=$(python3 -c '
import json, sys
d = json.load(sys.stdin)
print(d["peer"]["id"])
print(d["token"])
' <<<"$response" 2>/dev/null || true)
    peer_id=$(sed -n 1p <<<"$parsed")
    token=$(sed -n 2p <<<"$parsed")
  else
    token=$(sed -n 's/.*"token"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p' <<<"$response")
    peer_id=$(sed -n 's/.*"peer"[[:space:]]*:[[:space:]]*{[^}]*"id"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p' <<<"$response")
  fi
  [[ -n $token ]] || echo "$me: could not read a token from the peer response: $response" >&2
else
  echo "$me: creating the first peer failed: $(cat "$tmp/curl.err")" >&2
fi

local_url="http://localhost:$port/"
lan_urls=()
if [[ $bind == 0.0.0.0 || $bind == "::" || $bind == "[::]" ]]; then
  for addr in $(hostname -I 2>/dev/null || true); do
    case $addr in
      *:*) lan_urls+=("http://[$addr]:$port/") ;;
      *) lan_urls+=("http://$addr:$port/") ;;
    esac
  done
fi

{
  echo
  echo "================================================================================"
  echo " meshgate is running (node ${node_id:-?})"
  echo
  echo " Dashboard:  $local_url"
  for u in "${lan_urls[@]}"; do
    echo "             $u"
  done
  echo " Data dir:   ${data_dir:-?}"
  if [[ -n $token ]]; then
    echo
    echo " First peer: ${peer_id:-?} (first-peer)"
    echo " Token:      $token"
    echo
    echo " Try:"
    echo "   curl -H 'Authorization: Bearer $token' ${local_url}api/v1/peers/me"
    echo "   curl -N -H 'Authorization: Bearer $token' ${local_url}api/v1/events/stream"
  fi
  if [[ -n $admin_token ]]; then
    echo
    echo " Admin token: $admin_token"
    echo "             (shown this once: it guards node settings, mesh seeds and pin removal; only its hash is stored)"
  fi
  echo
  echo " Ctrl-C stops the node."
  echo "================================================================================"
  echo
}

wait_for_server
server_pid=
exit "$rc"
