#!/usr/bin/env bash
# Benchmarks, bounded in time, loopback only. Each prints ratios against a baseline measured in the same run.
#   make bench                 all of them
#   bench/run.sh mesh-scale    one of them
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
SWIFT=${SWIFT:-$(command -v swift || echo /opt/swift/usr/bin/swift)}
which=${1:-all}

if [[ $which == all || $which == mesh-scale ]]; then
  echo "==> mesh-scale: MeshCore simulator, cold start of N nodes (beacon discovery), ratios against N=10"
  "$SWIFT" build -c release --product mesh-scale >/dev/null
  timeout 600 .build/release/mesh-scale ${MESH_SCALE_NODES:-10 100 500}
fi
