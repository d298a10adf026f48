#!/usr/bin/env bash
# The file server of the share-source tests (`[[sources]]` of kind smb): Debian's Samba
# 4.17 file server (`samba`, which brings smbd and smbpasswd) and the `smbclient` command-line
# client the launcher's readiness check uses. The package would run smbd/nmbd/samba-ad-dc services
# of its own on ports 139/445 with /etc/samba/smb.conf; the tests start their own smbd on loopback
# with its configuration and state under a folder of theirs (scripts/sources/smb-launch.sh DIR
# PORT SHARE_PATH), so the package's services are kept from starting during the install (a
# temporary policy-rc.d) and are then stopped and disabled. About a minute from nothing.
#
#   scripts/setup/smb-server.sh           # prints the smbd binary's path
set -euo pipefail

SMBD=/usr/sbin/smbd
SERVICES="smbd nmbd samba-ad-dc winbind"
stop_services() {
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    for s in $SERVICES; do systemctl disable --now "$s" >/dev/null 2>&1 || true; done
  else
    for s in $SERVICES; do
      if [ -x "/etc/init.d/$s" ]; then "/etc/init.d/$s" stop >/dev/null 2>&1 || true; fi
      if command -v update-rc.d >/dev/null 2>&1; then update-rc.d "$s" disable >/dev/null 2>&1 || true; fi
    done
  fi
}

"$(dirname "$0")/debian-packages.sh" samba smbclient

# The package may have started its own servers anyway; stop them and keep them from starting at boot.
stop_services

# The path on stdout, so that `SMBD="$(scripts/setup/smb-server.sh)"` works.
echo "$SMBD"
