#!/usr/bin/env bash
# Starts a throwaway PostgreSQL 15 and Milvus 2.3.5 on loopback for the shared-backend benchmarks
# and evaluations, and writes a configuration that points ragbox at them. Run inside a network
# namespace that has only loopback (`unshare --net`), as scripts/bench/nodes.sh does; the servers
# die with it. Needs what scripts/setup/shared-servers.sh installs, and root (PostgreSQL runs as
# the `postgres` user).
#
#   source scripts/bench/shared-servers-up.sh DIR   # sets RAGBOX_SHARED_CONFIG=DIR/shared.toml
set -euo pipefail
dir=${1:?usage: source scripts/bench/shared-servers-up.sh DIR}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cache=${RAGBOX_CACHE_DIR:-$HOME/.cache/ragbox}
pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
ip link set lo up
rm -rf "$dir"; mkdir -p "$dir/mv"; chmod 777 "$dir"
runuser -u postgres -- "$pgbin/initdb" -D "$dir/pg" -U ragbox -A trust -E UTF8 --no-sync >/dev/null
runuser -u postgres -- "$pgbin/postgres" -D "$dir/pg" -p 55432 -k "$dir" -c listen_addresses=127.0.0.1 >"$dir/pg.log" 2>&1 &
RAGBOX_MILVUS_RUNTIME=$cache/milvus-runtime "$cache/milvus-venv/bin/python" "$root/scripts/setup/milvus-launch.py" "$dir/mv" 59530 59091 >"$dir/mv.log" 2>&1 &
for _ in $(seq 1 120); do curl -s -m 1 http://127.0.0.1:59091/healthz | grep -q OK && break; sleep 1; done
for _ in $(seq 1 60); do "$pgbin/pg_isready" -q -h 127.0.0.1 -p 55432 && break; sleep 1; done
# A role of its own, no superuser, so the catalog's row-level security binds it.
psql -q -h 127.0.0.1 -p 55432 -U ragbox -d postgres -c "CREATE ROLE node LOGIN NOSUPERUSER NOBYPASSRLS" -c "CREATE DATABASE ragbox OWNER node"
cat >"$dir/shared.toml" <<EOT
[store]
backend = "shared"
[store.shared]
postgres = "postgresql://node@127.0.0.1:55432/ragbox"
milvus = "http://127.0.0.1:59530"
EOT
export RAGBOX_SHARED_CONFIG=$dir/shared.toml
