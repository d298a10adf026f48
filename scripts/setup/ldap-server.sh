#!/usr/bin/env bash
# The directory server of the LDAP sign-in tests (crates/server/src/sso/ldap.rs): OpenLDAP's
# slapd 2.5 and the ldap-utils client tools (ldapsearch, ldapwhoami, slappasswd) from Debian.
# Debian's package wants to run a directory of its own; it is preseeded to configure none
# (slapd/no_configuration) and its service is stopped and disabled, because the tests start
# their own instance on loopback with everything under a folder of theirs
# (scripts/sso/ldap-launch.sh DIR PORT). Seconds when installed; about half a minute from nothing.
#
#   scripts/setup/ldap-server.sh
set -euo pipefail

# No directory of the package's own (debian-packages.sh answers its questions): the tests bring theirs.
"$(dirname "$0")/debian-packages.sh" slapd ldap-utils

# The package may have started its own slapd; stop it and keep it from starting at boot.
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  systemctl disable --now slapd >/dev/null 2>&1 || true
else
  if [ -x /etc/init.d/slapd ]; then
    /etc/init.d/slapd stop >/dev/null 2>&1 || true
  fi
  if command -v update-rc.d >/dev/null 2>&1; then
    update-rc.d slapd disable >/dev/null 2>&1 || true
  fi
fi

# The path on stdout, so that `SLAPD="$(scripts/setup/ldap-server.sh)"` works.
echo /usr/sbin/slapd
