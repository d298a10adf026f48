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

"$(dirname "$0")/debian-packages.sh" dovecot-imapd

# The package may have started its own dovecot anyway; stop it and keep it from starting at boot.
stop_service

# The path on stdout, so that `DOVECOT="$(scripts/setup/mail-server.sh)"` works.
echo "$DOVECOT"
