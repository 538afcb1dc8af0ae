#!/usr/bin/env bash
# Prepares ENGINE (docker or podman) to build Docker/Dockerfile on this host:
# - a podman that cannot start a container with its defaults gets /etc/containers/containers.conf
#   (see podman_config below);
# - the two base images of the Dockerfile are made to exist in the engine's local image store:
#     docker.io/library/debian:bookworm-slim   the runtime stage
#     docker.io/library/swift:6.3-bookworm     the build stage
#   An image already in the store is used as it is (a kept machine prepares them once). A missing one
#   is pulled; when it cannot be pulled (a machine without a registry, like CI's), it is made locally:
#     debian:bookworm-slim  mmdebstrap --variant=minbase bookworm with this host's Debian sources and
#                           the official slim image's docs/man/locale exclusions, imported;
#     swift:6.3-bookworm    that image, plus the toolchain's runtime packages (those the official image
#                           has) and this machine's Swift toolchain (MESHGATE_SWIFT_TOOLCHAIN, default
#                           /opt/swift) copied to /usr, committed.
#   Both carry the label org.meshgate.local-base=1, which `make docker-clean` looks for.
#
#   scripts/docker-prepare.sh ENGINE
#   MESHGATE_DOCKER_PULL=0              never try to pull; prepare what is missing locally
#   MESHGATE_DOCKER_PULL_TIMEOUT=120    bound on each pull attempt (seconds)
set -euo pipefail

me=docker-prepare
engine=${1:?usage: docker-prepare.sh docker|podman}
pull=${MESHGATE_DOCKER_PULL:-1}
pull_timeout=${MESHGATE_DOCKER_PULL_TIMEOUT:-120}
toolchain=${MESHGATE_SWIFT_TOOLCHAIN:-/opt/swift}

debian_image=docker.io/library/debian:bookworm-slim
swift_image=docker.io/library/swift:6.3-bookworm
label=org.meshgate.local-base=1

say() { printf '%s: %s\n' "$me" "$*"; }

have_image() { "$engine" image inspect "$1" >/dev/null 2>&1; }

try_pull() {
  [[ $pull == 1 ]] || return 1
  say "pulling $1 (at most ${pull_timeout}s)"
  if timeout "$pull_timeout" "$engine" pull -q "$1" >/dev/null 2>&1; then
    return 0
  fi
  say "cannot pull $1: preparing it locally"
  return 1
}

# This host's apt source files for Debian's own archives (one-line or deb822); the image's apt uses them.
host_sources() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [[ -s $f ]] || continue
    grep -Eq '^[[:space:]]*(deb[[:space:]]|URIs:)' "$f" || continue
    grep -Eiq 'debian' "$f" || continue # a third-party repository has no place in the image
    printf '%s\n' "$f"
  done
}

make_debian() {
  command -v mmdebstrap >/dev/null 2>&1 || {
    say "mmdebstrap is needed to prepare $debian_image locally (apt-get install mmdebstrap)" >&2
    exit 1
  }
  local -a mirrors
  mapfile -t mirrors < <(host_sources)
  say "$debian_image: mmdebstrap --variant=minbase bookworm | $engine import"
  # No docs (but copyrights), man or info pages, translations: what the official slim image leaves out.
  # The merged-usr hook merges /usr as the official image is, without the usrmerge package (and perl).
  local -a hooks=()
  if [[ -d /usr/share/mmdebstrap/hooks/merged-usr ]]; then
    hooks=(--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr)
  fi
  local log
  log=$(mktemp)
  # shellcheck disable=SC2016 # $1 is expanded by mmdebstrap's hook shell
  mmdebstrap --variant=minbase --mode=root --format=tar --quiet "${hooks[@]}" \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-include=/usr/share/locale/locale.alias' \
    --dpkgopt='path-exclude=/usr/share/lintian/*' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
    bookworm - "${mirrors[@]}" 2>"$log" |
    "$engine" import --change 'CMD ["bash"]' --change "LABEL $label" - "$debian_image" >>"$log" 2>&1 || true
  have_image "$debian_image" || {
    tail -n 30 "$log" >&2
    say "preparing $debian_image failed" >&2
    rm -f "$log"
    exit 1
  }
  rm -f "$log"
}

# Podman's defaults fail on hosts like CI's: a default nofile ulimit above what a container may raise
# there ("error setting rlimit type 7"), crun refusing hybrid cgroups, and the systemd cgroup manager
# without systemd. When a trivial container does not start and /etc/containers/containers.conf does not
# exist, write one that keeps the host's limits and uses runc and cgroupfs. A file that is not ours is
# left alone, with a message saying what to add to it.
conf=/etc/containers/containers.conf
conf_marker='# meshgate: written by scripts/docker-prepare.sh'
podman_config() {
  [[ $engine == podman ]] || return 0
  local err
  if err=$(podman run --rm --network none "$debian_image" true 2>&1); then
    return 0
  fi
  if [[ -e $conf ]]; then
    say "podman cannot start a container: $err" >&2
    if ! grep -qF "$conf_marker" "$conf"; then
      say "$conf is not ours; add to it: [containers] default_ulimits = [], and" \
        '[engine] runtime = "runc", cgroup_manager = "cgroupfs"' >&2
    fi
    exit 1
  fi
  say "podman cannot start a container with its defaults; writing $conf"
  say "(the error was: $err)"
  mkdir -p "$(dirname "$conf")"
  cat >"$conf" <<END
$conf_marker: podman's defaults fail on this host.
[containers]
# The host's limits: podman's default nofile limit is more than a container may raise here.
default_ulimits = []

[engine]
# crun refuses hybrid cgroup hierarchies, Debian's runc works; no systemd, so cgroupfs.
runtime = "runc"
cgroup_manager = "cgroupfs"
END
  if ! err=$(podman run --rm --network none "$debian_image" true 2>&1); then
    say "podman still cannot start a container: $err" >&2
    exit 1
  fi
}

# The runtime packages of the official swift:6.3-bookworm image.
swift_packages=(binutils git gnupg2 libc6-dev libcurl4-openssl-dev libedit2 libgcc-12-dev libncurses6
  libpython3-dev libsqlite3-0 libstdc++-12-dev libxml2-dev libz3-dev pkg-config tzdata zlib1g-dev)

make_swift() {
  [[ -x $toolchain/usr/bin/swift ]] || {
    say "no Swift toolchain at $toolchain to prepare $swift_image (set MESHGATE_SWIFT_TOOLCHAIN)" >&2
    exit 1
  }
  local name=meshgate-prepare-swift-$$
  say "$swift_image: $debian_image + the toolchain's runtime packages + $toolchain"
  "$engine" rm -f "$name" >/dev/null 2>&1 || true
  # The container goes whatever happens, a timeout's TERM included.
  # shellcheck disable=SC2064 # expand now: name and engine are fixed
  trap "$engine rm -f $name >/dev/null 2>&1 || true" EXIT
  trap 'exit 1' TERM INT
  # --network host: apt inside reaches the package mirror the host uses.
  # shellcheck disable=SC2016 # expanded by the container's bash
  if ! "$engine" run --name "$name" --network host -v "$toolchain:/toolchain:ro" "$debian_image" bash -euc '
      export DEBIAN_FRONTEND=noninteractive
      apt-get update -qq
      apt-get install -y -qq --no-install-recommends "$@" >/dev/null
      rm -rf /var/lib/apt/lists/*
      cp -a /toolchain/usr/. /usr/
      swift --version' bash "${swift_packages[@]}"; then
    "$engine" rm -f "$name" >/dev/null 2>&1 || true
    say "preparing $swift_image failed" >&2
    exit 1
  fi
  "$engine" commit --change 'CMD ["bash"]' --change "LABEL $label" "$name" "$swift_image" >/dev/null 2>&1
  "$engine" rm -f "$name" >/dev/null
  have_image "$swift_image" || {
    say "committing $swift_image failed" >&2
    exit 1
  }
}

if have_image "$debian_image"; then
  say "$debian_image present"
elif ! try_pull "$debian_image"; then
  make_debian
fi

podman_config

if have_image "$swift_image"; then
  say "$swift_image present"
elif ! try_pull "$swift_image"; then
  make_swift
fi
