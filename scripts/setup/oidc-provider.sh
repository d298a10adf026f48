#!/usr/bin/env bash
# The OpenID Connect provider of the OIDC sign-in tests (crates/server/src/sso/oidc.rs):
# Glewlwyd 2.7 from Debian (an SSO server whose OIDC plugin signs RS256 ID tokens and JWT access
# tokens, standalone on SQLite), plus sqlite3, openssl and python3, which the launcher needs.
# Debian's package would set up a database and a service of its own: it is told to configure
# none (its post-install script fails otherwise, scripts/setup/debian-packages.sh), dbconfig to do
# nothing (dbconfig-no-thanks, which also keeps the MariaDB client out), and the service is
# stopped and disabled, because the tests start their own instance on loopback with everything
# under a folder of theirs (scripts/sso/oidc-launch.sh DIR PORT). Idempotent; run as root.
#
#   scripts/setup/oidc-provider.sh
set -euo pipefail

# No database of the package's own (debian-packages.sh answers its questions): the tests bring theirs.
"$(dirname "$0")/debian-packages.sh" glewlwyd dbconfig-no-thanks sqlite3 openssl python3

# The package may have started its own server; stop it and keep it from starting at boot.
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  systemctl disable --now glewlwyd >/dev/null 2>&1 || true
else
  if [ -x /etc/init.d/glewlwyd ]; then
    /etc/init.d/glewlwyd stop >/dev/null 2>&1 || true
  fi
  if command -v update-rc.d >/dev/null 2>&1; then
    update-rc.d glewlwyd disable >/dev/null 2>&1 || true
  fi
fi

for f in /usr/share/dbconfig-common/data/glewlwyd/install/sqlite3 /usr/lib/glewlwyd/plugin/libprotocol_oidc.so; do
  [ -e "$f" ] || { echo "[oidc-provider] $f is missing: the glewlwyd package is incomplete" >&2; exit 1; }
done

# The path on stdout, so that `GLEWLWYD="$(scripts/setup/oidc-provider.sh)"` works.
echo /usr/bin/glewlwyd
