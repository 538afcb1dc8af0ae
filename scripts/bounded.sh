#!/usr/bin/env bash
# bounded.sh MINUTES LABEL COMMAND...: runs COMMAND, and stops it (and everything it started) if it runs longer than
# MINUTES. The bound is only there to end a test step that hangs: a step that passes takes a small part of it
# (docs/development.md lists each step's usual time). Past the bound the step fails with a message naming it, so a
# hung test costs minutes, not the whole run.
set -uo pipefail
minutes=$1 label=$2
shift 2
timeout --kill-after=30s "${minutes}m" "$@"
status=$?
if [[ $status == 124 || $status == 137 ]]; then
  echo "error: $label ran longer than its bound of $minutes minutes and was stopped: a test in it hangs." >&2
  echo "       The last test reported as started above is the one to look at." >&2
fi
exit "$status"
