#!/usr/bin/env bash
# Installs Debian packages for the test servers and tools, from nothing or over an earlier run,
# without questions and without starting any of their services (the tests start their own
# instances on loopback). Every set-up script that needs a Debian package calls this:
#   - the debconf answers of every package we install are set here, once: a package whose
#     post-install script would take a branch that fails without a database or a directory of its
#     own (Glewlwyd's "Personalized" configuration, slapd's initial directory) is told to
#     configure none;
#   - a package left half-installed or half-configured by an earlier failed run is configured
#     again first; what cannot be repaired is reported with the command that clears it;
#   - the package lists are refreshed once an hour at most (a stamp under the ragbox cache);
#   - no service starts during the install (a temporary policy-rc.d, when none is set).
# Nothing to do (and no root needed) when every package is installed. Run as root otherwise.
#
#   scripts/setup/debian-packages.sh PACKAGE...
set -euo pipefail

missing=()
for p in "$@"; do
  status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null || true)
  [ "$status" = "ii " ] || missing+=("$p")
done
broken=$(dpkg --audit 2>/dev/null || true)
if [ ${#missing[@]} -eq 0 ] && [ -z "$broken" ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "[debian-packages] error: ${missing[*]:-a repair} needs root: run 'sudo $0 $*' once, then this again" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
debconf-set-selections <<'EOF'
slapd slapd/no_configuration boolean true
glewlwyd glewlwyd/config_type select No configuration
glewlwyd glewlwyd/dbconfig-install boolean false
glewlwyd glewlwyd/database-type select sqlite3
EOF

policy=""
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
  policy=/usr/sbin/policy-rc.d
fi
trap '[ -z "$policy" ] || rm -f "$policy"' EXIT

# What an earlier run left half-done: configure it again with the answers above.
repair() {
  if ! dpkg --configure -a >&2; then
    echo "[debian-packages] error: dpkg cannot finish configuring the packages an earlier run left" >&2
    echo "  half-installed (dpkg --audit lists them). Purge them and run this again:" >&2
    echo "    apt-get purge -y <package>; dpkg --configure -a; $0 $*" >&2
    exit 1
  fi
}
if [ -n "$broken" ]; then
  echo "[debian-packages] repairing what an earlier run left half-installed:" >&2
  printf '%s\n' "$broken" | sed 's/^/  /' >&2
  repair
  still=()
  for p in "${missing[@]}"; do
    [ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null || true)" = "ii " ] || still+=("$p")
  done
  missing=("${still[@]}")
fi
[ ${#missing[@]} -gt 0 ] || exit 0

stamp="${RAGBOX_CACHE_DIR:-$HOME/.cache/ragbox}/apt-lists.stamp"
if [ -z "$(find "$stamp" -mmin -60 2>/dev/null)" ]; then
  apt-get update -qq >&2
  mkdir -p "$(dirname "$stamp")" && touch "$stamp"
fi
echo "[debian-packages] installing ${missing[*]}" >&2
if ! apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; then
  echo "[debian-packages] the install failed; configuring what it left and trying once more" >&2
  repair
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
