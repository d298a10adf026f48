#!/usr/bin/env bash
# Two `ragbox serve` nodes over one shared backend (PostgreSQL + Milvus on loopback, in a network
# namespace of their own), against the same load on one node: `ragbox bench nodes` with 16
# clients asking, each phase 60 s. Ingests the sample corpus (tests/data/corpus) first.
#
#   scripts/bench/nodes.sh [--clients N] [--seconds S] [--route ask|search]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
if [ "${RAGBOX_IN_NETNS:-}" != 1 ]; then
  exec env RAGBOX_IN_NETNS=1 unshare --net bash "$0" "$@"
fi
. "$root/scripts/setup/build-env.sh"
bin=$CARGO_TARGET_DIR/debug/ragbox
work=$(mktemp -d /tmp/ragbox-nodes-XXXX)
chmod 755 "$work"  # PostgreSQL runs as its own user and must reach its folder
source "$root/scripts/bench/shared-servers-up.sh" "$work/servers"
export RAGBOX_MODELS_DIR=${RAGBOX_MODELS_DIR:-$root/models}
config=$RAGBOX_SHARED_CONFIG
# Room in each node's queue for every client: the figures are latency, not 503s.
printf '[server]\nqueue = 64\n' >>"$config"
"$bin" --config "$config" --data-dir "$work/node-a" ingest -q "$root/tests/data/corpus"
key=$("$bin" --config "$config" --data-dir "$work/node-a" keys create --name bench --tenant default --role reader)
ports=()
for node in a b; do
  "$bin" --config "$config" --data-dir "$work/node-$node" serve --listen 127.0.0.1:0 >"$work/$node.out" 2>"$work/$node.err" &
  for _ in $(seq 1 120); do grep -q "http://" "$work/$node.out" 2>/dev/null && break; sleep 1; done
  ports+=("$(grep -o '127.0.0.1:[0-9]*' "$work/$node.out" | head -1)")
done
"$bin" --config "$config" --data-dir "$work/node-a" doctor | grep "store:" || true
RAGBOX_BENCH_KEY=$key "$bin" --data-dir "$work/node-a" bench nodes --node "${ports[0]}" --node "${ports[1]}" --tenant default "$@"
