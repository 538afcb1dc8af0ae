#!/usr/bin/env bash
# Benchmarks, bounded in time, loopback only. Each prints ratios against a baseline measured in the same run.
#   make bench                 all of them
#   bench/run.sh mesh-scale    one of them: mesh-scale | ws-broadcast | ws-fanout | rest | startup | ws-idle | transfer | group-send
#
# Knobs (environment):
#   BENCH_SCRATCH=DIR    swift --scratch-path for the meshgate build (default .build)
#   MESHGATE_BIN=PATH    use this meshgate binary instead of building one
#   WS_SUBS=50 WS_MSGS=2000 WS_SIZE=64 WS_RATE=100 WS_RATE_SECONDS=10    ws-broadcast load
#   WS_PACED_ROUNDS=4 WS_BUSY=1                                           ws-broadcast: paced rounds per server, and as
#                                                                         many with one core busy (WS_BUSY=0: none)
#   FANOUT_SUBS=100 FANOUT_MSGS=2000                                      ws-fanout load (1 and 3 nodes)
#   FANOUT_PUBLISHER_DIALS=1                                              ws-fanout: node A dials B and C (default: B, C dial A)
#   REST_SECONDS=10 REST_PACED_RATE=5000 REST_BUSY=1                      rest load (REST_BUSY=0: no busy runs)
#   STARTUP_RUNS=20                                                       startup
#   IDLE_CLIENTS=10000                                                    ws-idle
# Tools: bench/packages.txt (apt, via scripts/install-deps.sh), bench/requirements.txt (pip).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
SWIFT=${SWIFT:-$(command -v swift || echo /opt/swift/usr/bin/swift)}
which=${1:-all}
want() { [[ $which == all || $which == "$1" ]]; }
case $which in
  all | mesh-scale | ws-broadcast | ws-fanout | rest | startup | ws-idle | transfer | group-send) ;;
  *) echo "usage: bench/run.sh [all|mesh-scale|ws-broadcast|ws-fanout|rest|startup|ws-idle|transfer|group-send]" >&2; exit 2 ;;
esac

if want transfer; then
  # File-transfer goodput (1 GiB, node to node, data on disk and tmpfs, both link directions) against a C pipeline
  # doing the same work (bench/pipeline), a raw TCP copy for reference, time to first byte and peak RSS; its own script.
  bash bench/transfer.sh
  [[ $which == transfer ]] && exit 0
fi

if want group-send; then
  # One file to 30 recipients on 3 nodes: one group send vs 30 single sends (wall time, mesh bytes); its own script.
  bash bench/group-send.sh
  [[ $which == group-send ]] && exit 0
fi

if want mesh-scale; then
  echo "==> mesh-scale: MeshCore simulator, cold start of N nodes (beacon discovery), ratios against N=10"
  "$SWIFT" build -c release --product mesh-scale >/dev/null
  timeout 600 .build/release/mesh-scale ${MESH_SCALE_NODES:-10 100 500}
fi

want ws-broadcast || want ws-fanout || want rest || want startup || want ws-idle || exit 0

# ---------------------------------------------------------------------------------------------------------------
# Shared set-up: tools, builds, process bookkeeping.

bash scripts/install-deps.sh bench/packages.txt
if ! python3 -c 'import websockets.asyncio.server' 2>/dev/null; then
  python3 -m pip install -q -r bench/requirements.txt
fi

source bench/common.sh
bench_setup bench

WSLOAD=$WORK/wsload
gcc -O2 -Wall -o "$WSLOAD" bench/wsload/wsload.c

ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

# start_meshgate NAME [ARGS...]: starts a node on a free loopback port; sets MG_PID, MG_PORT, MG_BASE.
start_meshgate() {
  # The setups create up to IDLE_CLIENTS peers from one address as fast as they can: no creation rate, the largest cap.
  start_node "$1" --peer-create-rate 0 --max-peers 50000 "${@:2}"
  MG_PID=$PID MG_PORT=$PORT
  MG_BASE=http://127.0.0.1:$MG_PORT
}

stop_pid() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# field FILE LABEL KEY: a key=value from wsload's RESULT line with that label.
field() { sed -n "s/^RESULT label=$2 .* $3=\([^ ]*\).*/\1/p" "$1" | tail -1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 == 0) print "n/a"; else printf "%.2fx", a / b }'; }

# ---------------------------------------------------------------------------------------------------------------
if want ws-broadcast; then
  subs=${WS_SUBS:-50} msgs=${WS_MSGS:-2000} size=${WS_SIZE:-64} rate=${WS_RATE:-100}
  rate_msgs=$(( rate * ${WS_RATE_SECONDS:-10} )) rounds=${WS_PACED_ROUNDS:-4}
  out=$WORK/ws-broadcast.txt
  echo "==> ws-broadcast: $subs subscribers, 1 publisher, $msgs x $size B (window 64 in flight), then $rate msg/s for $rate_msgs msgs"
  echo "    load generator: bench/wsload (C, epoll, one thread); baselines: lws-mirror (C), Python websockets"
  echo "    paced: $rounds rounds, the C server and meshgate alternating which goes first (both stay up); each paced figure"
  echo "    is the median of its rounds, each paced ratio the median of the rounds' own ratios (a round's runs are seconds"
  echo "    apart, so the machine's drift moves both)"
  # run_saturated LABEL PID ARGS... / run_paced LABEL PID ARGS...: one wsload run against a server.
  run_saturated() {
    local label=$1 pid=$2; shift 2
    timeout 60 "$WSLOAD" "$@" -m "$msgs" -s "$size" --window 64 --server-pid "$pid" --label "$label" --timeout 30 \
      | tee -a "$out" | grep RESULT || true
  }
  run_paced() {
    local label=$1 pid=$2; shift 2
    timeout 60 "$WSLOAD" "$@" -m "$rate_msgs" -s "$size" --rate "$rate" --window 100000 --server-pid "$pid" \
      --label "$label" --timeout 30 | tee -a "$out" | grep RESULT || true
  }

  # (a) the C libwebsockets test server, mirror protocol (a broadcast room); it stays up for the paced rounds
  port=$(free_port)
  libwebsockets-test-server --port "$port" --interface lo >"$WORK/lws-test-server.log" 2>&1 &
  c_pid=$!; PIDS+=("$c_pid")
  sleep 0.5
  c_args=(--sub-url "ws://127.0.0.1:$port/" -n "$subs" --protocol lws-mirror-protocol)
  run_saturated c "$c_pid" "${c_args[@]}"

  # (b) Python websockets broadcast server (saturated and one paced run, for reference)
  python3 bench/py_broadcast.py --port 0 >"$WORK/py.log" 2>&1 &
  pid=$!; PIDS+=("$pid")
  for _ in $(seq 50); do grep -q ready "$WORK/py.log" && break; sleep 0.1; done
  port=$(sed -n 's/.*port=//p' "$WORK/py.log")
  run_saturated python "$pid" --sub-url "ws://127.0.0.1:$port/" -n "$subs"
  run_paced python-paced "$pid" --sub-url "ws://127.0.0.1:$port/" -n "$subs"
  stop_pid "$pid"

  # (c) meshgate: N peers in one session, publisher sends with {"op":"send"} on its /api/v1/ws socket
  start_meshgate ws-broadcast
  python3 bench/mg_setup.py --base "$MG_BASE" -n "$subs" --out "$WORK/mg"
  sid=$(cat "$WORK/mg/session")
  mg_args=(--sub-urls "$WORK/mg/subs.txt" --pub-url "$(cat "$WORK/mg/pub.txt")" --ready-first
    --template '{"op":"send","session":"'"$sid"'","mode":"reliable","text":"%s"}')
  run_saturated meshgate "$MG_PID" "${mg_args[@]}"

  # paced_rounds [-busy]: the paced rounds, alternating which server goes first (labels c[-busy]-paced-N and
  # meshgate[-busy]-paced-N).
  paced_rounds() {
    for round in $(seq "$rounds"); do
      if (( round % 2 )); then
        run_paced "c${1:-}-paced-$round" "$c_pid" "${c_args[@]}"
        run_paced "meshgate${1:-}-paced-$round" "$MG_PID" "${mg_args[@]}"
      else
        run_paced "meshgate${1:-}-paced-$round" "$MG_PID" "${mg_args[@]}"
        run_paced "c${1:-}-paced-$round" "$c_pid" "${c_args[@]}"
      fi
    done
  }
  # (d) paced rounds
  paced_rounds
  # (e) the same paced rounds while a competing process keeps one core busy (a bounded shell loop; WS_BUSY=0 leaves
  # them out): the tail under other work, against the C server under the same load.
  if [[ ${WS_BUSY:-1} == 1 ]]; then
    timeout $(( (rate_msgs / rate + 30) * rounds * 2 + 60 )) sh -c 'while :; do :; done' &
    burner=$!; PIDS+=("$burner")
    paced_rounds -busy
    stop_pid "$burner"
  fi
  stop_pid "$MG_PID"
  stop_pid "$c_pid"

  # median: the median of the numbers on standard input, one a line (nothing when there are none).
  median() {
    sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else if (NR) print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
  }
  # paced LABEL KEY: the median over the rounds.
  paced() { for round in $(seq "$rounds"); do field "$out" "$1-paced-$round" "$2"; done | median; }
  # round_ratios KEY [-busy]: meshgate/C of KEY in each (busy) round, a line each ("n/a" when C has no figure).
  round_ratios() {
    for round in $(seq "$rounds"); do
      awk -v a="$(field "$out" "meshgate${2:-}-paced-$round" "$1")" -v b="$(field "$out" "c${2:-}-paced-$round" "$1")" \
        'BEGIN { if (b + 0 > 0) print a / b; else print "n/a" }'
    done
  }
  # paced_ratio KEY [-busy]: the median of the rounds' ratios; rounds_of KEY [-busy]: the rounds' ratios on one line.
  paced_ratio() {
    local m
    m=$(round_ratios "$1" "${2:-}" | { grep -v n/a || true; } | median)
    if [[ -n $m ]]; then printf '%.2fx' "$m"; else printf 'n/a'; fi
  }
  rounds_of() { round_ratios "$1" "${2:-}" | awk '{ if ($1 == "n/a") printf "n/a "; else printf "%.2f ", $1 }'; }

  echo
  printf '%-18s %12s %12s %9s %9s %10s %10s %12s %s\n' server "deliveries/s" "msgs/s" "p99 ms" "paced p50" "paced p99" \
    "µs/deliv" "paced µs/dl" "complete/load-cpu-vs-server"
  for l in c python meshgate; do
    if [[ $l == python ]]; then
      p50=$(field "$out" python-paced p50_ms) p99=$(field "$out" python-paced p99_ms)
      us=$(field "$out" python-paced server_us_per_delivery)
    else
      p50=$(paced $l p50_ms) p99=$(paced $l p99_ms) us=$(paced $l server_us_per_delivery)
    fi
    printf '%-18s %12s %12s %9s %9s %10s %10s %12s %s/%s\n' "$l" "$(field "$out" $l deliveries_per_s)" \
      "$(field "$out" $l msgs_per_s)" "$(field "$out" $l p99_ms)" "$p50" "$p99" \
      "$(field "$out" $l server_us_per_delivery)" "$us" "$(field "$out" $l complete)" \
      "$(field "$out" $l load_vs_server_cpu)"
  done
  m=$(field "$out" meshgate deliveries_per_s) c=$(field "$out" c deliveries_per_s) p=$(field "$out" python deliveries_per_s)
  echo "ratios: meshgate/C msgs/s $(ratio "$m" "$c") (target >= 0.8x), meshgate/python msgs/s $(ratio "$m" "$p") (target >= 5x)"
  echo "        meshgate/C paced p99 $(paced_ratio p99_ms) (target <= 1.2x; rounds: $(rounds_of p99_ms))," \
    "saturated p99 $(ratio "$(field "$out" meshgate p99_ms)" "$(field "$out" c p99_ms)")," \
    "server CPU per delivery $(ratio "$(field "$out" meshgate server_us_per_delivery)" "$(field "$out" c server_us_per_delivery)"),"
  echo "        paced server CPU per delivery $(paced_ratio server_us_per_delivery) (target <= 1.2x; rounds: $(rounds_of server_us_per_delivery));" \
    "vs Python websockets, which keeps no log: $(ratio "$(paced meshgate server_us_per_delivery)" "$(field "$out" python-paced server_us_per_delivery)")"
  if [[ ${WS_BUSY:-1} == 1 ]]; then
    echo "        one core busy: meshgate/C paced p99 $(paced_ratio p99_ms -busy) (target <= 1.2x; rounds: $(rounds_of p99_ms -busy))," \
      "paced p99 meshgate $(paced meshgate-busy p99_ms) ms, C $(paced c-busy p99_ms) ms;" \
      "server CPU per delivery $(paced_ratio server_us_per_delivery -busy) (target <= 1.2x; rounds: $(rounds_of server_us_per_delivery -busy))"
  fi
fi

# ---------------------------------------------------------------------------------------------------------------
if want ws-fanout; then
  subs=${FANOUT_SUBS:-100} msgs=${FANOUT_MSGS:-2000}
  out=$WORK/ws-fanout.txt
  echo "==> ws-fanout: 1 publisher on node A, $subs subscribers on A alone, then spread over nodes A, B, C"
  echo "    (one session; one frame per remote node per message); baseline: the same load on one node"
  # fanout_run LABEL SUB_URLS PUB_URL SESSION PIDS: window-mode run; CPU is summed over the given node pids.
  fanout_run() {
    timeout 90 "$WSLOAD" --sub-urls "$2" --pub-url "$3" --ready-first -m "$msgs" -s 64 --window 64 \
      --server-pid "$5" --label "$1" --timeout 60 \
      --template '{"op":"send","session":"'"$4"'","mode":"reliable","text":"%s"}' | tee -a "$out" | grep RESULT || true
  }
  start_meshgate fanout-single
  python3 bench/mg_setup.py --base "$MG_BASE" -n "$subs" --out "$WORK/fan1"
  fanout_run single "$WORK/fan1/subs.txt" "$(cat "$WORK/fan1/pub.txt")" "$(cat "$WORK/fan1/session")" "$MG_PID"
  stop_pid "$MG_PID"

  if [[ ${FANOUT_PUBLISHER_DIALS:-0} == 1 ]]; then
    # The publisher's node A dials B and C: its frames to them go out on connections it dialled.
    start_meshgate fanout-b
    b_base=$MG_BASE b_pid=$MG_PID b_port=$MG_PORT
    start_meshgate fanout-c
    c_base=$MG_BASE c_pid=$MG_PID c_port=$MG_PORT
    start_meshgate fanout-a --peer "127.0.0.1:$b_port" --peer "127.0.0.1:$c_port"
    a_pid=$MG_PID a_port=$MG_PORT a_base=$MG_BASE
  else
    start_meshgate fanout-a
    a_pid=$MG_PID a_port=$MG_PORT a_base=$MG_BASE
    start_meshgate fanout-b --peer "127.0.0.1:$a_port"
    b_base=$MG_BASE b_pid=$MG_PID
    start_meshgate fanout-c --peer "127.0.0.1:$a_port"
    c_base=$MG_BASE c_pid=$MG_PID
  fi
  for _ in $(seq 100); do
    linked=$(curl -sf "$a_base/api/v1/mesh/nodes" | python3 -c 'import json,sys; print(sum(n["state"] == "linked" for n in json.load(sys.stdin)["nodes"]))')
    [[ $linked == 2 ]] && break
    sleep 0.1
  done
  python3 bench/mg_setup.py --base "$a_base,$b_base,$c_base" -n "$subs" --out "$WORK/fan3"
  # Server CPU is summed over the three nodes: each message is stored and delivered on every node that hosts members.
  fanout_run three-nodes "$WORK/fan3/subs.txt" "$(cat "$WORK/fan3/pub.txt")" "$(cat "$WORK/fan3/session")" \
    "$a_pid,$b_pid,$c_pid"
  stop_pid "$a_pid"; stop_pid "$b_pid"; stop_pid "$c_pid"
  echo "ratio: 3-node/1-node deliveries/s $(ratio "$(field "$out" three-nodes deliveries_per_s)" "$(field "$out" single deliveries_per_s)") (target >= 0.5x); p99 $(field "$out" three-nodes p99_ms) ms vs $(field "$out" single p99_ms) ms"
fi

# ---------------------------------------------------------------------------------------------------------------
if want rest; then
  secs=${REST_SECONDS:-10} paced=${REST_PACED_RATE:-5000}
  # paced: C connections each waiting D = 11 ms between requests: C*1000/(D + latency + wrk's own timer lag) req/s.
  # 13 % over paced/100 connections: with 10 % and 10 ms (2026-12-02 to 2026-12-03) wrk reached only 4 350-4 800 req/s here even
  # against a trivial C server, whose cycle measured ~12.7 ms; 66 x 11 ms reached 5 000-5 400. Two wrk threads (one
  # could not drive 5 000 req/s; more than the 2 cores only add switching).
  pconns=$(( paced * 13 / 1000 + 1 )) pdelay=11
  # Paced twice: "paced" keeps every connection's pause at exactly 11 ms, as until 2026-12-04. Then the connections one
  # burst of answers releases all send their next request in the same instant again, so arrivals stay lock-stepped to
  # the server's batching and a request waits for the whole burst (the C responder's p99 too: 1.1 ms, against 0.3 ms
  # otherwise). "independent" draws each pause uniformly from 5.5-16.5 ms (the same mean, so the same rate): clients
  # that do not wait for one another, as many independent LAN clients are.
  echo "==> rest: ${secs}s per run; GET /healthz is the baseline; closed loop (wrk -t1 -c16), paced (~$paced req/s," \
    "wrk -t2 -c$pconns, ${pdelay} ms between a connection's requests) and independent (the same with pauses of" \
    "${pdelay} ms +/- 50 %); machine baseline: a minimal C HTTP responder"
  # The machine's own limit at this rate: a one-thread epoll C server answering a fixed body, same wrk settings.
  gcc -O2 -Wall -o "$WORK/minihttp" bench/minihttp/minihttp.c
  cport=$(free_port)
  "$WORK/minihttp" "$cport" >"$WORK/minihttp.log" 2>&1 &
  cpid=$!; PIDS+=("$cpid")
  for _ in $(seq 50); do grep -q ready "$WORK/minihttp.log" && break; sleep 0.1; done
  start_meshgate rest
  tok() { curl -sf -X POST -H 'Content-Type: application/json' -d "{\"displayName\":\"$1\"}" "$MG_BASE/api/v1/peers" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])'; }
  reader=$(tok bench-reader) writer=$(tok bench-writer)
  for i in $(seq 20); do
    curl -sf -o /dev/null -X POST -H "Authorization: Bearer $reader" -H 'Content-Type: application/json' \
      -d "{\"name\":\"job $i\",\"payment\":12.5,\"notes\":\"bench\"}" "$MG_BASE/api/v1/jobs"
  done
  out=$WORK/rest.txt
  # wrk_run LABEL CONNS DELAY_MS TOKEN METHOD PATH [BASE]
  wrk_run() {
    local label=$1 conns=$2 delay=$3 token=$4 method=$5 path=$6 base=${7:-$MG_BASE}
    MG_TOKEN=$token MG_METHOD=$method MG_DELAY_MS=$delay MG_JITTER=$jitter timeout $((secs + 20)) \
      wrk -t"$threads" -c"$conns" -d"${secs}s" --latency -s bench/wrk/request.lua "$base$path" >"$WORK/wrk-$label.txt" 2>&1 || true
    python3 bench/wrk_summary.py "$label" "$WORK/wrk-$label.txt" | tee -a "$out"
  }
  # "busy": paced and independent again while a competing process keeps one core busy (a bounded shell loop, stopped
  # after the runs): the tail a node on a machine doing other work shows, against its own /healthz and the C responder
  # under the same load (REST_BUSY=0 leaves it out).
  modes="closed paced independent"
  [[ ${REST_BUSY:-1} == 1 ]] && modes+=" paced-busy independent-busy"
  burner=""
  for mode in $modes; do
    jitter=0
    if [[ $mode == closed ]]; then conns=16 delay=0 threads=1; else conns=$pconns delay=$pdelay threads=2; fi
    [[ $mode == independent* ]] && jitter=0.5
    if [[ $mode == *-busy && -z $burner ]]; then
      timeout $(( (secs + 20) * 8 )) sh -c 'while :; do :; done' &
      burner=$!; PIDS+=("$burner")
    fi
    [[ $mode != closed ]] && wrk_run "c-responder-$mode" "$conns" "$delay" "" GET /healthz "http://127.0.0.1:$cport"
    wrk_run "healthz-$mode" "$conns" "$delay" "$reader" GET /healthz
    wrk_run "get-jobs-$mode" "$conns" "$delay" "$reader" GET /api/v1/jobs
    wrk_run "post-jobs-$mode" "$conns" "$delay" "$writer" POST /api/v1/jobs
  done
  [[ -n $burner ]] && stop_pid "$burner"
  stop_pid "$MG_PID"
  stop_pid "$cpid"
  rget() { awk -v l="label=$1" -v k="$2" '$2 == l { for (i = 3; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) v = kv[2] } } END { print v }' "$out"; }
  for mode in $modes; do
    for ep in get-jobs post-jobs; do
      echo "ratios ($mode) $ep vs healthz: req/s $(ratio "$(rget $ep-$mode rps)" "$(rget healthz-$mode rps)")," \
        "p99 $(ratio "$(rget $ep-$mode p99_ms)" "$(rget healthz-$mode p99_ms)") (p99 $(rget $ep-$mode p99_ms) ms at $(rget $ep-$mode rps) req/s; target < 3 ms at 5000 req/s)"
    done
  done
  for mode in ${modes#closed }; do
    echo "machine baseline ($mode): minimal C responder p99 $(rget c-responder-$mode p99_ms) ms at $(rget c-responder-$mode rps) req/s;" \
      "meshgate healthz p99 $(rget healthz-$mode p99_ms) ms at $(rget healthz-$mode rps) req/s;" \
      "POST /api/v1/jobs p99 $(ratio "$(rget post-jobs-$mode p99_ms)" "$(rget c-responder-$mode p99_ms)") the C responder's"
  done
fi

# ---------------------------------------------------------------------------------------------------------------
if want startup; then
  echo "==> startup: time from exec to the 'meshgate ready' line, ${STARTUP_RUNS:-20} runs, vs 'python3 -c pass'"
  python3 bench/startup.py --runs "${STARTUP_RUNS:-20}" --work "$WORK/startup" -- "$MESHGATE"
fi

# ---------------------------------------------------------------------------------------------------------------
if want ws-idle; then
  n=${IDLE_CLIENTS:-10000}
  echo "==> ws-idle: RSS growth for $n idle WebSocket clients; baseline: libwebsockets-test-server with the same clients"
  rss() { awk '/^VmRSS/ { print $2 }' "/proc/$1/status"; }  # KiB
  # idle_run LABEL PID URL_ARGS...: prints KiB before/after and bytes per client
  idle_run() {
    local label=$1 pid=$2; shift 2
    local before after fifo=$WORK/idle-$label.fifo
    sleep 0.5
    before=$(rss "$pid")
    mkfifo "$fifo"
    timeout 60 "$WSLOAD" "$@" -m 0 --hold 4 --timeout 40 >"$fifo" &
    local lp=$!
    # wait until all are connected, give the server a moment, then read RSS
    if grep -m1 -q 'wsload connected' "$fifo"; then
      sleep 1.5
      after=$(rss "$pid")
    else
      after=$before
      echo "wsload could not connect all $n clients" >&2
    fi
    cat "$fifo" >/dev/null || true
    wait "$lp" || true
    rm -f "$fifo"
    echo "IDLE label=$label clients=$n rss_before_kib=$before rss_after_kib=$after bytes_per_client=$(( (after - before) * 1024 / n ))" \
      | tee -a "$WORK/idle.txt"
  }
  port=$(free_port)
  libwebsockets-test-server --port "$port" --interface lo >"$WORK/lws-idle.log" 2>&1 &
  pid=$!; PIDS+=("$pid")
  idle_run c "$pid" --sub-url "ws://127.0.0.1:$port/" -n "$n" --protocol lws-mirror-protocol
  stop_pid "$pid"
  start_meshgate ws-idle
  python3 bench/mg_setup.py --base "$MG_BASE" -n "$n" --out "$WORK/idle" --no-session >/dev/null
  idle_run meshgate "$MG_PID" --sub-urls "$WORK/idle/subs.txt"
  stop_pid "$MG_PID"
  b() { sed -n "s/^IDLE label=$1 .*bytes_per_client=\([-0-9]*\).*/\1/p" "$WORK/idle.txt"; }
  echo "ratio: meshgate/C bytes per idle client $(ratio "$(b meshgate)" "$(b c)"); meshgate $(( $(b meshgate) / 1024 )) KiB per client (target <= 16 KiB)"
fi
