#!/usr/bin/env bash
# The IMAP server of the mailbox-source tests (`[[sources]]` of kind imap): Debian's
# Dovecot 2.3 (`dovecot-imapd`, which brings `dovecot-core` with doveadm). The package would run a
# server of its own on ports 143/993 with the system's mail; the tests start their own instance on
# loopback with its whole configuration under a folder of theirs (scripts/sources/imap-launch.sh
# DIR PORT), so the package's service is kept from starting during the install (a temporary
# policy-rc.d) and is then stopped and disabled. python3 (its imaplib) and openssl, which the
# launcher and scripts/sources/imap-fill.py use, are expected to be there already. Seconds when
# installed; about half a minute from nothing.
#
#   scripts/setup/mail-server.sh          # prints the dovecot binary's path
set -euo pipefail

DOVECOT=/usr/sbin/dovecot
stop_service() {
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    systemctl disable --now dovecot.service dovecot.socket >/dev/null 2>&1 || true
  else
    if [ -x /etc/init.d/dovecot ]; then /etc/init.d/dovecot stop >/dev/null 2>&1 || true; fi
    if command -v update-rc.d >/dev/null 2>&1; then update-rc.d dovecot disable >/dev/null 2>&1 || true; fi
  fi
}

if [ ! -x "$DOVECOT" ] || ! command -v doveadm >/dev/null 2>&1 \
   || [ ! -e /usr/lib/dovecot/imap ]; then
  echo "[mail-server] installing dovecot-imapd (Debian)" >&2
  export DEBIAN_FRONTEND=noninteractive
  # Keep maintainer scripts from starting the package's own server (when no policy is set).
  policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    policy=/usr/sbin/policy-rc.d
  fi
  trap '[ -z "$policy" ] || rm -f "$policy"' EXIT
  apt-get update -qq && apt-get install -y -qq --no-install-recommends dovecot-imapd >/dev/null
fi

# The package may have started its own dovecot anyway; stop it and keep it from starting at boot.
stop_service

# The path on stdout, so that `DOVECOT="$(scripts/setup/mail-server.sh)"` works.
echo "$DOVECOT"
