#!/usr/bin/env bash
# Installs meshgate into a scratch DESTDIR (make install-files) and checks what an admin gets:
#   - every installed file is there (binary, dashboard, man page, unit, settings file);
#   - `systemd-analyze verify` accepts the unit with no warning at all (it needs ExecStart's binary to exist, so it
#     verifies a copy whose ExecStart points into the scratch root);
#   - the unit keeps its hardening and readiness directives;
#   - the installed binary, started from / as the unit starts it, finds its dashboard, tells NOTIFY_SOCKET it is
#     ready after its ready line, and logs one plain line per event (scripts/check-installed.py).
# INSTALL_BINARY picks the binary (default: the debug build, which make test has just built).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
me=check-unit
binary=${INSTALL_BINARY:-.build/debug/meshgate}
[[ -x $binary ]] || { echo "$me: $binary is not built; run swift build (or set INSTALL_BINARY)" >&2; exit 1; }
command -v systemd-analyze >/dev/null || {
  echo "$me: systemd-analyze not found; install the systemd package (make deps-test)" >&2; exit 1; }

staging=$(mktemp -d "${TMPDIR:-/tmp}/meshgate-install.XXXXXX")
trap 'rm -rf "$staging"' EXIT
make -s install-files DESTDIR="$staging" PREFIX=/usr/local INSTALL_BINARY="$binary" >/dev/null

failures=0
fail() { echo "$me: FAIL: $*" >&2; failures=$((failures + 1)); }
for file in usr/local/bin/meshgate usr/local/share/meshgate/Public/index.html usr/local/share/man/man1/meshgate.1 \
  usr/local/lib/systemd/system/meshgate.service etc/default/meshgate; do
  [[ -e $staging/$file ]] || fail "make install did not install /$file"
done

unit=$staging/usr/local/lib/systemd/system/meshgate.service
grep -qx 'ExecStart=/usr/local/bin/meshgate' "$unit" || fail "the unit's ExecStart is not the installed binary"
for directive in Type=notify DynamicUser=yes StateDirectory=meshgate ProtectSystem=strict NoNewPrivileges=yes \
  EnvironmentFile=-/etc/default/meshgate Restart=on-failure; do
  grep -qx "$directive" "$unit" || fail "the unit lacks $directive"
done

mkdir -p "$staging/verify"
sed "s|^ExecStart=/usr/local/bin/|ExecStart=$staging/usr/local/bin/|" "$unit" > "$staging/verify/meshgate.service"
if ! output=$(systemd-analyze verify --man=no "$staging/verify/meshgate.service" 2>&1) || [[ -n $output ]]; then
  fail "systemd-analyze verify meshgate.service:"$'\n'"$output"
fi

python3 scripts/check-installed.py "$staging/usr/local/bin/meshgate" || fail "the installed binary (above)"

if ((failures)); then
  echo "$me: $failures check(s) failed" >&2
  exit 1
fi
echo "$me: the installed unit verifies, the installed node finds its dashboard and reports ready"
