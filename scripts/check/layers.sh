#!/usr/bin/env bash
# Enforces the dependency direction of docs/ARCHITECTURE.md, in two parts:
#  1. the crates: each workspace member may depend only on the ragbox crates below it. Cargo then
#     refuses, at compile time, any import that skips a floor (a face reaching into the store);
#     this guards the manifests, where such an edge would be added;
#  2. the modules of ragbox-core, one crate of many floors: each may import only the modules listed
#     for it. A `use crate::X` (or `crate::X::` path) outside the allowed set fails the check.
set -euo pipefail
cd "$(dirname "$0")/../.."

status=0

declare -A crates=(
  [kernels]=""
  [crates/core]="ragbox-kernels"
  [crates/eval]="ragbox-core"
  [crates/fuzz]="ragbox-core"
  [crates/sources]="ragbox-core"
  [crates/service]="ragbox-core ragbox-sources"
  [crates/server]="ragbox-service"
  [crates/cli]="ragbox-service ragbox-server"
  [.]="ragbox-core ragbox-eval ragbox-service ragbox-server ragbox-cli"
)
for dir in "${!crates[@]}"; do
  # The ragbox crates named under [dependencies] (dev-dependencies may reach lower: tests).
  deps=$(awk '/^\[/{section=$0} section=="[dependencies]" && /^ragbox-/{sub(/[ .=].*/, ""); print}' "$dir/Cargo.toml")
  for d in $deps; do
    if ! [[ " ${crates[$dir]} " == *" $d "* ]]; then
      echo "layer violation: $dir/Cargo.toml depends on $d (allowed: ${crates[$dir]:-no ragbox crate})" >&2
      status=1
    fi
  done
done

declare -A allowed=(
  [types]=""
  [words]=""
  [error]="types"
  [allowlist]="types error"
  [access]="types error"
  [config]="types error model allowlist chunk store retrieve answer access"
  [model]="types error"
  [embed]="types error model"
  [rerank]="types error model"
  [source]="types error"
  [chunk]="types error"
  [store]="types error access"
  [ingest]="types error source chunk embed store access"
  [retrieve]="types error embed rerank store access"
  [generate]="types error model rerank allowlist"
  [annotation]="types error generate ingest answer"
  [answer]="types error words chunk embed rerank store retrieve generate"
  [conversation]="types error words generate"
  [app]="types error config model embed rerank source chunk store ingest retrieve generate answer annotation allowlist access"
  [testing]="types error model embed generate"
)
core=crates/core/src
for module in "${!allowed[@]}"; do
  files=$(ls "$core/$module.rs" 2>/dev/null; find "$core/$module" -name '*.rs' 2>/dev/null || true)
  for f in $files; do
    for used in $(grep -oE 'crate::[a-z_]+' "$f" | sort -u | sed 's/crate:://'); do
      [ "$used" = "$module" ] && continue
      [ "$used" = testing ] && continue  # test-only fakes, compiled under cfg(test)
      if ! [[ " ${allowed[$module]} " == *" $used "* ]]; then
        echo "layer violation: $f uses crate::$used (allowed for $module: ${allowed[$module]:-nothing})" >&2
        status=1
      fi
    done
  done
done
# Every module of ragbox-core has its row above.
for f in "$core"/*.rs "$core"/*/; do
  m=$(basename "$f" .rs)
  [ "$m" = lib ] && continue
  if [ -z "${allowed[$m]+x}" ]; then
    echo "layer check: $core/$m has no row in scripts/check/layers.sh; add the modules it may import" >&2
    status=1
  fi
done
[ $status = 0 ] && echo "layers ok" >&2
exit $status
