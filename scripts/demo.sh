#!/usr/bin/env bash
# The README's first command, on a fresh machine or a warm one: make the patched crates, fetch the
# pinned models into ~/.cache/ragbox, build once (the target directory and features scripts/test.sh
# uses, so the test command that follows builds nothing again), ingest the sample corpus the repo
# ships into a scratch data folder, and ask it a question.
#   scripts/demo.sh [DATA_DIR] [QUESTION]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup/build-env.sh
DATA="${1:-/tmp/ragbox-demo}"
QUESTION="${2:-How many days after a trip do I have to submit my expense claim?}"

scripts/setup/patch-crates.sh
scripts/setup/fetch-models.sh
cargo build --locked --workspace --all-targets --features "$FEATURES"
ragbox="$CARGO_TARGET_DIR/debug/ragbox"
"$ragbox" --data-dir "$DATA" ingest tests/data/corpus
"$ragbox" --data-dir "$DATA" ask "$QUESTION"
echo "(the binary is $ragbox; try: $ragbox --data-dir $DATA ask \"Is the IT service desk open on Saturdays?\", or a question the documents do not answer: \"Who stands in for the CISO on the crisis management team?\")" >&2
