#!/usr/bin/env bash
# Enforces the module dependency direction of STYLE.md: each module may import only the modules
# listed for it. A `use crate::X` (or `crate::X::` path) outside the allowed set fails the check.
set -euo pipefail
cd "$(dirname "$0")/.."

declare -A allowed=(
  [types]=""
  [error]="types"
  [allowlist]="types error"
  [config]="types error model allowlist chunk store answer"
  [model]="types error"
  [embed]="types error model"
  [rerank]="types error model"
  [source]="types error"
  [chunk]="types error"
  [store]="types error"
  [ingest]="types error source chunk embed store"
  [fuzz]="types error source chunk"
  [retrieve]="types error embed rerank store"
  [generate]="types error model rerank allowlist"
  [annotate]="types error generate ingest answer"
  [answer]="types error chunk embed rerank store retrieve generate"
  [eval]="types error chunk embed rerank store ingest retrieve generate answer"
  [app]="types error config model embed rerank source chunk store ingest retrieve generate answer annotate eval allowlist"
  [testing]="types error model embed generate"
  [service]="types error config chunk store ingest retrieve generate answer app"
)

status=0
for module in "${!allowed[@]}"; do
  files=$(ls "src/$module.rs" 2>/dev/null; find "src/$module" -name '*.rs' 2>/dev/null || true)
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
# The faces (every command of the CLI outside src/cli/tools/, and the HTTP server) go through the
# service layer: they import neither the store, the models, the ingest nor the retriever, and
# reach no internals through a method call. The measuring tools (src/cli/tools/: bench, eval,
# trace, embed, parse, models) drive the pipeline's parts directly.
for f in src/cli/*.rs $(find src/server -name '*.rs' 2>/dev/null); do
  [ -f "$f" ] || continue
  if grep -nE 'ragbox::(store|model|embed|rerank|retrieve|ingest|app)\b' "$f"; then
    echo "layer violation: $f imports store/model/ingest/retrieve internals; go through ragbox::service (or move a measuring tool to src/cli/tools/)" >&2
    status=1
  fi
  # Reaching the internals through a method call imports nothing: `g.app()`, `service.app()`,
  # `.store()`, `.catalog()`.
  if grep -nE '\.(app|store|catalog)\(\)' "$f"; then
    echo "layer violation: $f reaches app/store internals through a method call; go through ragbox::service" >&2
    status=1
  fi
done
# Nothing in the library imports the binary's modules.
if grep -rnE 'crate::(cli|server)' src --include=*.rs | grep -v '^src/main.rs' | grep -v '^src/cli/' | grep -v '^src/server/'; then
  echo "layer violation: the library imports cli/server" >&2
  status=1
fi
[ $status = 0 ] && echo "layers ok" >&2
exit $status
