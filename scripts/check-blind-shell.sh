#!/usr/bin/env bash
# `make lint` step: keeps the node's shell blind to the features that own their behaviour.
#
# The shell (Sources/Gateway/Node, Events, HTTP and Mesh) reaches features only through the `NodeFeature` hooks and
# the feature registry (Sources/Gateway/Features/FeatureRegistry.swift, the one list that names them), so it must not
# name a feature type below. And a feature listed below keeps its behaviour in its own type: no file in its folder
# extends `Node`. Add a feature here once it owns its code.
set -euo pipefail
cd "$(dirname "$0")/.."

# Feature type and the folder under Sources/Gateway/Features that holds it.
features=(
  ChatFeature:Chat
  JobsFeature:Jobs
  TransceiveFeature:Transceive
  InvitationsFeature:Invitations
  DiscoveryFeature:Discovery
  PayloadsFeature:Payloads
)
shell_dirs=(Sources/Gateway/Node Sources/Gateway/Events Sources/Gateway/HTTP Sources/Gateway/Mesh)

failed=0
for entry in "${features[@]}"; do
  type=${entry%%:*}
  folder=Sources/Gateway/Features/${entry#*:}
  if hits=$(grep -rnw --include='*.swift' -- "$type" "${shell_dirs[@]}"); then
    echo "check-blind-shell: the shell names feature type $type (reach it through a NodeFeature hook instead):" >&2
    echo "$hits" >&2
    failed=1
  fi
  if hits=$(grep -rnE --include='*.swift' -- '^[[:space:]]*((public|package|internal|fileprivate|private)[[:space:]]+)?extension[[:space:]]+Node\b' "$folder"); then
    echo "check-blind-shell: $folder extends Node (move the code into $type):" >&2
    echo "$hits" >&2
    failed=1
  fi
done
if ((failed)); then exit 1; fi
echo "check-blind-shell: the shell names none of ${#features[@]} feature types, and they extend no Node"
