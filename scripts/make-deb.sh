#!/usr/bin/env bash
# Builds a Debian package of the release binary with dpkg-deb: .build/deb/meshgate_VERSION_ARCH.deb.
# It holds what `make install PREFIX=/usr` installs (binary, dashboard, man page, systemd unit in /lib/systemd/system)
# and /etc/default/meshgate as a conffile; it depends on the runtime libraries of Docker/packages-runtime.txt.
# Installing it does not start the service: `systemctl enable --now meshgate` does (docs/operations.md).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
binary=${INSTALL_BINARY:-.build/static/release/meshgate}
[[ -x $binary ]] || { echo "make-deb: $binary is not built; run make deb" >&2; exit 1; }
command -v dpkg-deb >/dev/null || { echo "make-deb: dpkg-deb not found (Debian's dpkg package)" >&2; exit 1; }
version=$("$binary" --version | awk '{print $2}')
arch=$(dpkg --print-architecture)
out=.build/deb
root=$out/root
rm -rf "$root"
mkdir -p "$root/DEBIAN"
make -s install-files DESTDIR="$root" PREFIX=/usr UNITDIR=/lib/systemd/system INSTALL_BINARY="$binary" >/dev/null
depends=$(sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' Docker/packages-runtime.txt | paste -sd, | sed 's/,/, /g')
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat > "$root/DEBIAN/control" <<CONTROL
Package: meshgate
Version: $version
Architecture: $arch
Maintainer: meshgate developers <meshgate@localhost>
Installed-Size: $size
Depends: $depends
Recommends: avahi-daemon
Section: net
Priority: optional
Description: LAN peer gateway: nearby networking for browsers and curl
 Nodes find each other on the local network and link into a mesh; each node
 hosts peers (browser tabs, scripts, services) that discover, invite and talk
 to peers on every node over HTTP/JSON, WebSocket and Server-Sent Events.
CONTROL
echo /etc/default/meshgate > "$root/DEBIAN/conffiles"
cat > "$root/DEBIAN/postinst" <<'SCRIPT'
#!/bin/sh
set -e
if [ "$1" = configure ] && [ -d /run/systemd/system ]; then
  systemctl daemon-reload || true
  echo "meshgate: start it with: systemctl enable --now meshgate"
fi
SCRIPT
cat > "$root/DEBIAN/prerm" <<'SCRIPT'
#!/bin/sh
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
  systemctl disable --now meshgate.service || true
fi
SCRIPT
cat > "$root/DEBIAN/postrm" <<'SCRIPT'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi
SCRIPT
chmod 0755 "$root/DEBIAN/postinst" "$root/DEBIAN/prerm" "$root/DEBIAN/postrm"
package=$out/meshgate_${version}_${arch}.deb
dpkg-deb --root-owner-group --build "$root" "$package" >/dev/null
echo "make-deb: $package"
dpkg-deb --info "$package" | sed -n '/Package:/,/Depends:/p'
