#!/usr/bin/env bash
# `make docker-test`: builds Docker/Dockerfile and runs Docker/compose.yml through its checks, then removes
# everything it started.
#
# 1. Engine: docker when `docker info` reaches an engine, else podman (its packages, Docker/packages-docker-
#    test.txt, are installed when missing). Compose: `docker compose` (or docker-compose) with docker,
#    podman-compose (PATH, else a venv .build/compose-venv from Docker/requirements-compose.txt) with podman.
# 2. scripts/docker-prepare.sh: base images from the store, else pulled, else made locally (kept as a cache).
# 3. Builds the image (podman: --format docker, which keeps the HEALTHCHECK, and --network host for apt),
#    checks that `ldd` finds every library the binary loads, prints the image's size.
# 4. compose up with a project of its own, on free ports published on 127.0.0.1 only, then
#    scripts/docker-checks.py: /healthz on each node, the three linked over TLS, a job from a peer on
#    node-a to one on node-c and a file to one on node-b; the image's HEALTHCHECK reports healthy.
# 5. The containers stop gracefully: exit code 0 within 10 s of SIGTERM.
# 6. compose down (volumes kept) + up: same node identities, peers, job and file (scripts/docker-checks.py).
# 7. compose down -v; nothing of the project is left (containers, network, volumes). The image
#    (MESHGATE_DOCKER_IMAGE, default meshgate:docker-test), its build stage (…-build) and the base images stay
#    as the build cache; dangling images of earlier builds are pruned. `make docker-clean` removes the rest.
#
# Bounded: each step has its own timeout, the whole run MESHGATE_DOCKER_TEST_TIMEOUT seconds (default 2400).
# Logs of every step are in .build/docker-test/ (and the nodes' logs are printed when a check fails).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
me=docker-test
started=$SECONDS
image=${MESHGATE_DOCKER_IMAGE:-meshgate:docker-test}
budget=${MESHGATE_DOCKER_TEST_TIMEOUT:-2400}
build_timeout=${MESHGATE_DOCKER_BUILD_TIMEOUT:-1800}
logs=$root/.build/docker-test
project=meshgate-test-$$
mkdir -p "$logs"
rm -f "$logs"/*.log "$logs"/state.json

say() { printf '==> %s: %s\n' "$me" "$*"; }
# Each check that passed says so with pass; the run ends with "docker-test: N passed, N failed".
passed=0
pass() {
  passed=$((passed + 1))
  say "ok: $*"
}
fail() {
  printf '%s: FAILED: %s\n' "$me" "$*" >&2
  printf '%s: %d passed, 1 failed\n' "$me" "$passed" >&2
  exit 1
}
elapsed() { echo "$((SECONDS - $1))s"; }
# remaining TIMEOUT: the smaller of TIMEOUT and what is left of the whole run's budget (at least 1).
remaining() {
  local left=$((budget - (SECONDS - started)))
  ((left > 0)) || fail "the whole run took more than ${budget}s (MESHGATE_DOCKER_TEST_TIMEOUT)"
  echo $((left < $1 ? left : $1))
}
# run LOG TIMEOUT COMMAND...: runs the command bounded, its output into .build/docker-test/LOG.log; on
# failure prints the log's tail.
run() {
  local log=$logs/$1.log limit
  limit=$(remaining "$2")
  shift 2
  if ! timeout -k 10 "$limit" "$@" >>"$log" 2>&1; then
    echo "---- last lines of $log" >&2
    tail -n 40 "$log" >&2
    return 1
  fi
}

# ---- 1. engine and compose ----------------------------------------------------------------------------------------
engine=${MESHGATE_DOCKER_ENGINE:-}
if [[ -z $engine ]]; then
  if command -v docker >/dev/null 2>&1 && timeout 30 docker info >/dev/null 2>&1; then
    engine=docker
  else
    engine=podman
    command -v docker >/dev/null 2>&1 && say "docker is installed but reaches no engine (docker info): using podman"
  fi
fi
compose=()
case $engine in
  docker)
    if docker compose version >/dev/null 2>&1; then
      compose=(docker compose)
    elif command -v docker-compose >/dev/null 2>&1; then
      compose=(docker-compose)
    else
      fail "neither 'docker compose' nor docker-compose is installed"
    fi
    ;;
  podman)
    bash scripts/install-deps.sh Docker/packages-docker-test.txt
    if command -v podman-compose >/dev/null 2>&1; then
      compose=(podman-compose)
    else
      venv=$root/.build/compose-venv
      if [[ ! -x $venv/bin/podman-compose ]] || ! cmp -s Docker/requirements-compose.txt "$venv/requirements.txt"; then
        say "installing podman-compose into $venv"
        python3 -m venv --clear "$venv"
        "$venv/bin/pip" install -q --disable-pip-version-check -r Docker/requirements-compose.txt
        cp Docker/requirements-compose.txt "$venv/requirements.txt"
      fi
      compose=("$venv/bin/podman-compose")
    fi
    ;;
  *) fail "MESHGATE_DOCKER_ENGINE must be docker or podman, not '$engine'" ;;
esac
say "engine: $engine ($("$engine" --version | head -n 1)); compose: ${compose[*]##*/}"

# ---- 2. base images -----------------------------------------------------------------------------------------------
t=$SECONDS
timeout -k 10 "$(remaining 1800)" bash scripts/docker-prepare.sh "$engine" || fail "could not prepare the base images"
say "base images ready ($(elapsed "$t"))"

# ---- 3. image -----------------------------------------------------------------------------------------------------
# The build stage is tagged too ($image-build): it holds the Swift build, the slow part, and a tag keeps it
# from being pruned below. Then dangling images of earlier builds (label org.meshgate.image) are pruned.
build=(build -f Docker/Dockerfile)
[[ $engine == podman ]] && build+=(--format docker --network host)
t=$SECONDS
say "$engine ${build[*]} --target build -t $image-build . (log: $logs/build.log)"
run build "$build_timeout" "$engine" "${build[@]}" --target build -t "$image-build" . || fail "the build stage failed"
say "$engine ${build[*]} -t $image ."
run build "$build_timeout" "$engine" "${build[@]}" -t "$image" . || fail "the image did not build"
say "image built ($(elapsed "$t"))"
"$engine" image prune -f --filter label=org.meshgate.image >>"$logs/build.log" 2>&1 || true

libs=$(timeout 60 "$engine" run --rm --network none --entrypoint ldd "$image" /usr/local/bin/meshgate 2>>"$logs/run.log") ||
  fail "ldd did not run in the image"
if grep -q 'not found' <<<"$libs"; then
  fail "the runtime image lacks libraries the binary loads (Docker/packages-runtime.txt):
$(grep 'not found' <<<"$libs")"
fi
version=$(timeout 60 "$engine" run --rm --network none "$image" --version 2>>"$logs/run.log") || fail "meshgate --version failed in the image"
size=$("$engine" image inspect --format '{{.Size}}' "$image")
base_size=$("$engine" image inspect --format '{{.Size}}' docker.io/library/debian:bookworm-slim)
mb() { echo "$(($1 / 1000000)) MB"; }
pass "image $image: $version, $(mb "$size") ($(mb "$base_size") of it debian:bookworm-slim), ldd finds every library"

# ---- 4. compose up and the checks -------------------------------------------------------------------------------
free_ports() {
  python3 - <<'PY'
import socket
sockets = [socket.socket() for _ in range(3)]
for s in sockets:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in sockets))
PY
}
read -r port_a port_b port_c <<<"$(free_ports)"
export MESHGATE_IMAGE=$image MESHGATE_COMPOSE_ADDR=127.0.0.1
export MESHGATE_COMPOSE_PORT_A=$port_a MESHGATE_COMPOSE_PORT_B=$port_b MESHGATE_COMPOSE_PORT_C=$port_c
urls=("http://127.0.0.1:$port_a" "http://127.0.0.1:$port_b" "http://127.0.0.1:$port_c")
project_compose=("${compose[@]}" -p "$project" -f Docker/compose.yml)

containers() { # the project's containers, running or not
  "$engine" ps -a --filter "label=com.docker.compose.project=$project" --format '{{.Names}}'
}
container_of() { # container_of SERVICE
  "$engine" ps -a --filter "label=com.docker.compose.project=$project" \
    --filter "label=com.docker.compose.service=$1" --format '{{.Names}}' | head -n 1
}
volumes() {
  "$engine" volume ls --format '{{.Name}}' | grep -E "^${project}_" || true
}
networks() {
  "$engine" network ls --format '{{.Name}}' | grep -E "^${project}_" || true
}
node_logs() {
  local c
  for c in $(containers); do
    echo "---- last lines of $c's log" >&2
    "$engine" logs --tail 40 "$c" >&2 2>&1 || true
  done
}

cleaned=
cleanup() {
  local status=$?
  [[ -n $cleaned ]] && return
  cleaned=1
  if ((status != 0)); then node_logs; fi
  timeout -k 10 120 "${project_compose[@]}" down -v -t 10 >>"$logs/down.log" 2>&1 || true
  # Whatever compose left behind (an interrupted up, a compose that forgot something).
  local -a left
  mapfile -t left < <(containers)
  ((${#left[@]} == 0)) || "$engine" rm -f "${left[@]}" >/dev/null 2>&1 || true
  mapfile -t left < <(volumes)
  ((${#left[@]} == 0)) || "$engine" volume rm -f "${left[@]}" >/dev/null 2>&1 || true
  mapfile -t left < <(networks)
  ((${#left[@]} == 0)) || "$engine" network rm "${left[@]}" >/dev/null 2>&1 || true
}
trap cleanup EXIT
trap 'fail "interrupted"' INT TERM

t=$SECONDS
say "compose up (project $project, nodes on 127.0.0.1:$port_a, :$port_b, :$port_c)"
run up 300 "${project_compose[@]}" up -d || fail "compose up failed"
for service in node-a node-b node-c; do
  c=$(container_of "$service")
  [[ -n $c ]] || fail "compose started no container for $service"
  # Published on the loopback address only.
  published=$("$engine" port "$c" 8080/tcp 2>>"$logs/run.log") || fail "$engine port $c: no port published"
  while read -r address; do
    [[ $address == 127.0.0.1:* ]] || fail "$c publishes 8080/tcp on $address, not on 127.0.0.1"
  done <<<"$published"
done
pass "compose started node-a, node-b and node-c, published on 127.0.0.1 only"
check_phase() { # check_phase first|again: scripts/docker-checks.py, each line it passed counted
  local before
  before=$(wc -l <"$logs/checks.log" 2>/dev/null || echo 0)
  if ! run checks "$(remaining 600)" python3 scripts/docker-checks.py "$1" "$logs/state.json" "${urls[@]}"; then
    fail "the checks ($1) on the running nodes failed"
  fi
  while read -r line; do
    pass "${line#docker-checks: }"
  done < <(tail -n +"$((before + 1))" "$logs/checks.log")
}
touch "$logs/checks.log"
check_phase first

# The image's HEALTHCHECK. Podman without systemd runs health checks only when asked.
for service in node-a node-b node-c; do
  c=$(container_of "$service")
  if [[ $engine == podman ]]; then
    health=$(timeout 30 podman healthcheck run "$c" 2>&1) || fail "HEALTHCHECK of $c: ${health:-unhealthy}"
  else
    deadline=$((SECONDS + 60))
    until [[ $(docker inspect --format '{{.State.Health.Status}}' "$c") == healthy ]]; do
      ((SECONDS < deadline)) || fail "HEALTHCHECK of $c: $(docker inspect --format '{{.State.Health.Status}}' "$c")"
      sleep 1
    done
  fi
done
pass "the image's HEALTHCHECK reports each container healthy"
say "compose up and checks: $(elapsed "$t")"

# ---- 5. graceful stop -------------------------------------------------------------------------------------------
# All three at once, as `compose stop` and a host shutdown do. (One at a time, a node whose seed's container
# is already gone can block for seconds resolving the seed's name: as seen on CI.)
mapfile -t all < <(for service in node-a node-b node-c; do container_of "$service"; done)
t0=$(date +%s%N)
timeout 60 "$engine" stop -t 10 "${all[@]}" >/dev/null 2>>"$logs/run.log" || fail "$engine stop ${all[*]} failed"
ms=$((($(date +%s%N) - t0) / 1000000))
for c in "${all[@]}"; do
  code=$("$engine" inspect --format '{{.State.ExitCode}}' "$c")
  [[ $code == 0 ]] || fail "$c exited with $code on SIGTERM (137: killed after 10 s); want 0"
done
((ms < 10000)) || fail "stopping the three nodes took ${ms} ms; want less than 10 s"
pass "node-a, node-b and node-c stopped gracefully: exit code 0, all within $ms ms of SIGTERM"

# ---- 6. down + up: the volumes keep the data --------------------------------------------------------------------
t=$SECONDS
run down 120 "${project_compose[@]}" down -t 10 || fail "compose down failed"
[[ -z $(containers) ]] || fail "compose down left containers: $(containers | tr '\n' ' ')"
[[ $(volumes | wc -l) == 3 ]] || fail "compose down did not keep the three volumes: $(volumes | tr '\n' ' ')"
run up 300 "${project_compose[@]}" up -d || fail "compose up (again) failed"
check_phase again
say "down + up: $(elapsed "$t")"

# ---- 7. tear down -----------------------------------------------------------------------------------------------
run down 120 "${project_compose[@]}" down -v -t 10 || fail "compose down -v failed"
cleanup
trap - EXIT
leftover="$(containers) $(volumes) $(networks)"
[[ -z ${leftover//[[:space:]]/} ]] || fail "left behind after down -v: $leftover"
pass "torn down: no container, volume or network of $project is left"
say "passed in $(elapsed "$started") (image $image and the base images kept as build cache; make docker-clean)"
printf '%s: %d passed, 0 failed\n' "$me" "$passed"
