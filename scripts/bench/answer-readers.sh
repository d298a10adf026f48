#!/usr/bin/env bash
# The two readers side by side, one after the other in one run, on the sample corpus's 23
# questions (tests/data/corpus-questions.jsonl): evidence first (the default, with the
# cross-encoder) and the generative reader a tenant without a cross-encoder gets
# (answer.reader = "generate"). Prints each reader's eval --qa row: first token and answer p50.
#   scripts/bench/answer-readers.sh [RAGBOX_BINARY]
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/setup/build-env.sh
ragbox="${1:-$CARGO_TARGET_DIR/debug/ragbox}"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
printf '[answer]\nreader = "generate"\n' > "$scratch/generative.toml"
for reader in evidence-first generative; do
  config=()
  [ "$reader" = generative ] && config=(--config "$scratch/generative.toml")
  "$ragbox" "${config[@]}" eval --qa tests/data/corpus-questions.jsonl --corpus tests/data/corpus \
    --scratch "$scratch/store" --label "$reader" -q | grep -E '^\| (variant|---|'"$reader"')'
done
