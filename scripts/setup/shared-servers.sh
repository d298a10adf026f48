#!/usr/bin/env bash
# The servers of the shared backend, for its tests (tests/integration/shared.rs): PostgreSQL 15
# from Debian, and the Milvus 2.3.5 standalone server from its pinned PyPI wheel, installed into
# a venv OUTSIDE the clone and its binaries unpacked once:
#   ${RAGBOX_CACHE_DIR:-$HOME/.cache/ragbox}/milvus-venv      the wheel (sha256-pinned)
#   ${RAGBOX_CACHE_DIR:-$HOME/.cache/ragbox}/milvus-runtime   its server binaries and libraries
# Nothing is started here: the tests start both servers on loopback inside their network
# namespace and stop them. Seconds when everything is in place; about a minute from nothing.
#
#   scripts/setup/shared-servers.sh
set -euo pipefail
CACHE="${RAGBOX_CACHE_DIR:-$HOME/.cache/ragbox}"
VENV="$CACHE/milvus-venv"
RUNTIME="$CACHE/milvus-runtime"
WHEEL="milvus==2.3.5"
WHEEL_SHA256="69515a0630ce29fd10e101fa442afea8ca1387b93a456cd9bd41fdf3deb93d04"

"$(dirname "$0")/debian-packages.sh" postgresql-15
# Debian's package starts a cluster of its own; the tests start their own servers, so stop it.
if command -v pg_ctlcluster >/dev/null 2>&1; then
  pg_ctlcluster 15 main stop >/dev/null 2>&1 || true
fi

if ! "$VENV/bin/python" -c 'import milvus' 2>/dev/null; then
  echo "[shared-servers] installing $WHEEL into $VENV" >&2
  python3 -m venv "$VENV"
  requirements="$(mktemp)"
  echo "$WHEEL --hash=sha256:$WHEEL_SHA256" > "$requirements"
  "$VENV/bin/pip" install -q --no-deps --require-hashes -r "$requirements" >&2
  rm -f "$requirements"
fi
if [ ! -x "$RUNTIME/bin/milvus" ]; then
  echo "[shared-servers] unpacking the Milvus server into $RUNTIME" >&2
  "$VENV/bin/python" -c 'import sys, milvus; milvus._initialize_data_files(sys.argv[1])' "$RUNTIME"
fi
echo "postgres: $(ls -d /usr/lib/postgresql/*/bin | tail -1)" >&2
echo "milvus: $RUNTIME/bin/milvus" >&2
