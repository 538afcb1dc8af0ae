#!/usr/bin/env bash
# `make docker-clean`: removes what `make docker-test` keeps as its build cache: its image
# (MESHGATE_DOCKER_IMAGE, default meshgate:docker-test) and build stage (…-build), the dangling images of
# meshgate builds, and the base images scripts/docker-prepare.sh made locally (label org.meshgate.local-base=1). Pulled base images and
# /etc/containers/containers.conf stay. Containers, volumes and networks are removed by docker-test itself.
set -euo pipefail

me=docker-clean
image=${MESHGATE_DOCKER_IMAGE:-meshgate:docker-test}
engine=${MESHGATE_DOCKER_ENGINE:-}
if [[ -z $engine ]]; then
  if command -v docker >/dev/null 2>&1 && timeout 30 docker info >/dev/null 2>&1; then
    engine=docker
  elif command -v podman >/dev/null 2>&1; then
    engine=podman
  else
    echo "$me: neither a docker engine nor podman: nothing to clean"
    exit 0
  fi
fi

for tag in "$image" "$image-build"; do
  if "$engine" image inspect "$tag" >/dev/null 2>&1; then
    "$engine" rmi "$tag" >/dev/null
    echo "$me: removed $tag"
  fi
done
# What is left of the Dockerfile's builds (every layer carries the label org.meshgate.image).
"$engine" image prune -f --filter label=org.meshgate.image >/dev/null
echo "$me: removed the dangling images of meshgate builds"
mapfile -t bases < <("$engine" images --filter label=org.meshgate.local-base=1 --format '{{.Repository}}:{{.Tag}}')
# The swift image is built on the debian one: remove it first.
for base in $(printf '%s\n' "${bases[@]}" | sort -r); do
  [[ $base == *"<none>"* ]] && continue
  if "$engine" rmi "$base" >/dev/null 2>&1; then
    echo "$me: removed the locally prepared $base"
  else
    echo "$me: kept $base: another image or a container uses it" >&2
  fi
done
