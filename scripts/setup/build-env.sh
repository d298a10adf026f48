# Sourced by scripts/demo.sh and scripts/test.sh: one target directory and one feature set, so the
# README's second command reuses the build its first command made (and CI keeps target/ between
# runs, outside the clone).
export RAGBOX_CACHE_DIR="${RAGBOX_CACHE_DIR:-$HOME/.cache/ragbox}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$RAGBOX_CACHE_DIR/target}"
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-$(nproc)}"
FEATURES="${RAGBOX_TEST_FEATURES:-testing}"
