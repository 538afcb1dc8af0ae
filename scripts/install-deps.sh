#!/usr/bin/env bash
# Installs the Debian packages listed in the given files (default: Docker/packages-build.txt, what
# building needs; the Dockerfile reads the same lists). Only missing packages are installed;
# `apt-get update` runs only when something is missing.
#
# A package whose line ends in `# keep current` is also brought up to the distribution's current candidate
# when the installed one is older (tests that drive it, like the browser suite with Chromium, must see what a
# new machine installs today, not what this machine installed weeks ago). For those the package lists are
# refreshed when they are older than an hour (MESHGATE_APT_LISTS_MAX_AGE, minutes), and their versions printed.
#
#   scripts/install-deps.sh                                  # build packages (make build)
#   scripts/install-deps.sh Docker/packages-build.txt Docker/packages-run.txt    # make run
#   scripts/install-deps.sh Docker/packages-build.txt Docker/packages-test.txt   # make test
#   MESHGATE_SKIP_DEPS=1 make build                          # skip the check entirely (non-Debian hosts)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
lists=("$@")
((${#lists[@]})) || lists=("$root/Docker/packages-build.txt")
me=install-deps

if [[ ${MESHGATE_SKIP_DEPS:-0} == 1 ]]; then
  echo "$me: MESHGATE_SKIP_DEPS=1, not checking packages (${lists[*]##*/})"
  exit 0
fi

packages=()
current=()
for list in "${lists[@]}"; do
  if [[ ! -r $list ]]; then
    echo "$me: cannot read package list $list" >&2
    exit 1
  fi
  # One package per line; blank lines and '#' comments are tolerated.
  mapfile -t -O "${#packages[@]}" packages < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' "$list")
  mapfile -t -O "${#current[@]}" current < <(sed -n -e 's/^[[:space:]]*\([^#[:space:]]*\)[[:space:]]*#[[:space:]]*keep current.*/\1/p' "$list")
done

if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "$me: dpkg-query not found: this script supports Debian/Ubuntu only." >&2
  echo "$me: install the equivalents of: ${packages[*]}" >&2
  echo "$me: then re-run with MESHGATE_SKIP_DEPS=1 to skip this check." >&2
  exit 1
fi

missing=()
for pkg in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  [[ $status == "install ok installed" ]] || missing+=("$pkg")
done

if ((${#missing[@]} == 0 && ${#current[@]} == 0)); then
  echo "all packages present (${lists[*]##*/})"
  exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    # Without a terminal to ask for a password, fail instead of hanging.
    if [[ -t 0 ]]; then sudo=(sudo); else sudo=(sudo -n); fi
  elif ((${#missing[@]} == 0)); then
    echo "all packages present (${lists[*]##*/}); not root and no sudo, so not checked against the current candidates"
    exit 0
  else
    echo "$me: not root and sudo is not installed, so these packages cannot be installed:" >&2
    echo "    ${missing[*]}" >&2
    echo "$me: as root, run:" >&2
    echo "    apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
    exit 1
  fi
fi

apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120)

apt_update() {
  echo "$me: apt-get update"
  "${apt[@]}" -qq update
}

apt_install() {
  local log status
  log=$(mktemp)
  set +e
  "${apt[@]}" install -y -q --no-install-recommends "${missing[@]}" 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  set -e
  if ((status != 0)) && grep -q 'Unable to locate package' "$log"; then
    status=100
    install_unlocated=1
  fi
  rm -f "$log"
  return "$status"
}

installed_version() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || true; }
candidate_version() { apt-cache policy "$1" 2>/dev/null | sed -n 's/^ *Candidate: *//p' | head -n 1; }

# The packages kept current that are installed but older than the candidate join the install list (apt-get
# install upgrades an installed package to its candidate). The lists are refreshed first when they are stale, so
# "current" means today's.
if ((${#current[@]})); then
  max_age=${MESHGATE_APT_LISTS_MAX_AGE:-60}
  if ((${#missing[@]})) || [[ -z $(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mmin "-$max_age" -print -quit 2>/dev/null) ]]; then
    if apt_update; then
      updated=1
    else
      echo "$me: could not refresh the package lists; comparing with the lists as they are" >&2
    fi
  fi
  for pkg in "${current[@]}"; do
    have=$(installed_version "$pkg")
    want=$(candidate_version "$pkg")
    if [[ -n $have && -n $want && $want != "(none)" ]] && dpkg --compare-versions "$have" lt "$want"; then
      echo "$me: $pkg $have is older than the current candidate $want: upgrading"
      missing+=("$pkg")
    fi
  done
fi

print_current() {
  local pkg
  for pkg in "${current[@]}"; do
    printf '%s: %-16s %s (candidate %s)\n' "$me" "$pkg" "$(installed_version "$pkg")" "$(candidate_version "$pkg")"
  done
}

if ((${#missing[@]} == 0)); then
  echo "all packages present (${lists[*]##*/})"
  print_current
  exit 0
fi

echo "$me: missing packages: ${missing[*]}"

install_unlocated=0
((${updated:-0})) || apt_update
if ! apt_install; then
  if ((install_unlocated)); then
    echo "$me: apt could not locate a package; refreshing the package lists and retrying once"
    install_unlocated=0
    apt_update
    apt_install || {
      echo "$me: failed to install: ${missing[*]}" >&2
      exit 1
    }
  else
    echo "$me: failed to install: ${missing[*]}" >&2
    exit 1
  fi
fi
echo "$me: installed ${missing[*]}"
print_current
