#!/usr/bin/env bash
# Builds the libFuzzer harness (Fuzz/, swift build -Xswiftc -sanitize=fuzzer) and fuzzes each decoder for a bounded
# time: mesh-frame (MeshFrameCodec.decode), chat-wire (ChatWire.decode), request-body (JSONValue.parse and the REST
# request-body readers). Exits non-zero if any run finds a crash, a broken round trip, a leak or a timeout; the
# input that did it is kept in test-artifacts/fuzz/.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET]     default 10 (make test); make fuzz uses FUZZ_SECONDS=300
#
# The corpus grows in .build/fuzz-corpus/<target> and is reused by later runs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
SWIFT=${SWIFT:-$(command -v swift || echo /opt/swift/usr/bin/swift)}
seconds=${1:-${FUZZ_SECONDS:-10}}
root=$PWD
scratch=${FUZZ_SCRATCH:-$root/.build/fuzz}
echo "==> building the fuzz harness (swift build -Xswiftc -sanitize=fuzzer, scratch $scratch)"
mkdir -p test-artifacts/fuzz
if ! (cd Fuzz && "$SWIFT" build --scratch-path "$scratch" -Xswiftc -sanitize=fuzzer -Xswiftc -parse-as-library) \
  >test-artifacts/fuzz/build.log 2>&1; then
  grep -E 'error' test-artifacts/fuzz/build.log | head -20 >&2
  echo "fuzz: the harness did not build; see test-artifacts/fuzz/build.log" >&2
  exit 1
fi
binary=$scratch/debug/meshgate-fuzz
status=0
for target in mesh-frame chat-wire request-body; do
  corpus=$root/.build/fuzz-corpus/$target
  mkdir -p "$corpus"
  echo "==> fuzzing $target for ${seconds}s"
  # Swift's own backtracer would catch the trap first; turn it off so libFuzzer records the crashing input.
  if ! SWIFT_BACKTRACE=enable=no MESHGATE_FUZZ_TARGET=$target MESHGATE_FUZZ_SEED_DIR=$corpus \
    timeout $((seconds + 60)) "$binary" "$corpus" -max_total_time="$seconds" -max_len=8192 -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$root/test-artifacts/fuzz/$target-" \
    >"$root/test-artifacts/fuzz/$target.log" 2>&1; then
    echo "fuzz: $target FAILED; see test-artifacts/fuzz/$target.log and the crash-* input next to it" >&2
    grep -E 'ERROR|Precondition|Fatal|SUMMARY' "$root/test-artifacts/fuzz/$target.log" | head -5 >&2 || true
    status=1
  else
    grep -E '^stat::number_of_executed_units|^Done' "$root/test-artifacts/fuzz/$target.log" | tr '\n' ' '
    echo
  fi
done
exit $status
