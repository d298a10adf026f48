#!/usr/bin/env bash
# The crash test at full size: SIGKILL `ragbox ingest` at random moments RUNS times (default 100),
# re-run it, and check that every acknowledged document is present, no chunk is duplicated, the
# catalog and both indexes hold the same chunk ids, and search works.
#   scripts/check/crash.sh [RUNS]
# The test suite runs the same test with 20 kills.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${RAGBOX_CACHE_DIR:-$HOME/.cache/ragbox}/target}"
scripts/setup/patch-crates.sh
RAGBOX_CRASH_RUNS="${1:-100}" exec cargo test --features testing --test integration \
  sigkill_at_random_moments_loses_nothing_acknowledged -- --nocapture
