#!/usr/bin/env bash
# The whole test suite, on a fresh machine or a warm one:
#   1. fetch the pinned models into ~/.cache/ragbox and lay out models/ (seconds when cached);
#   2. build every crate of the workspace once (tests, benches, the binary they drive) with the tuned dev profile,
#      target dir kept outside the clone so repeated runs stay incremental;
#   3. check the module layering (and build llama.cpp's OpenAI-compatible server once, in a venv
#      under ~/.cache/ragbox, in the background, for the inference-server tests; install PostgreSQL and the pinned
#      Milvus wheel for the shared-backend tests, and slapd and Glewlwyd for the sign-in tests);
#   4. run every test inside a network namespace that has nothing but loopback: proof that nothing
#      after set-up needs the network.
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/setup/build-env.sh

need() { command -v "$1" >/dev/null 2>&1; }
# unshare and ip for the network namespace, python3's venv for the test clients and servers, and
# Debian's headless chromium driven through chromedriver for the web page's browser test.
scripts/setup/debian-packages.sh util-linux iproute2 python3 python3-pip python3-venv \
  chromium chromium-driver fonts-liberation
if ! need cargo; then
  echo "error: cargo is not installed; install a Rust toolchain (rustup) first" >&2
  exit 2
fi

step() { printf '\n== %s (%s)\n' "$1" "$(date +%T)" >&2; }

# llama.cpp's server, for the inference-server tests: compiling it takes minutes where it is not
# cached, so it is built in the background at the lowest priority, in the cycles the cargo build
# and the other tests leave idle; those tests wait for LLAMA_SERVER_READY (ok, or failed: the log).
LLAMA_SERVER_VENV="$RAGBOX_CACHE_DIR/llama-server-venv"
LLAMA_SERVER_READY="$RAGBOX_CACHE_DIR/llama-server-venv.ready"
export LLAMA_SERVER_VENV LLAMA_SERVER_READY
mkdir -p "$RAGBOX_CACHE_DIR"
rm -f "$LLAMA_SERVER_READY"
( if nice -n 19 scripts/setup/llama-server-venv.sh >/dev/null 2>"$LLAMA_SERVER_VENV.log"; then
    echo ok > "$LLAMA_SERVER_READY.part"
  else
    echo "failed: building llama.cpp's server failed; its log is $LLAMA_SERVER_VENV.log" > "$LLAMA_SERVER_READY.part"
  fi
  mv "$LLAMA_SERVER_READY.part" "$LLAMA_SERVER_READY" ) &
llama_pid=$!

step "models"
scripts/setup/fetch-models.sh

step "patched crates"
scripts/setup/patch-crates.sh

step "PostgreSQL and Milvus (the shared-backend tests start them inside the namespace)"
scripts/setup/shared-servers.sh

step "slapd (the LDAP sign-in tests start it inside the namespace)"
scripts/setup/ldap-server.sh >/dev/null

step "Glewlwyd (the OpenID Connect sign-in tests start it inside the namespace)"
scripts/setup/oidc-provider.sh >/dev/null

step "Dovecot and Samba (the mailbox and share source tests start them inside the namespace)"
scripts/setup/mail-server.sh >/dev/null
scripts/setup/smb-server.sh >/dev/null

step "the MCP client (the official Python SDK, in a venv under ~/.cache/ragbox)"
MCP_PYTHON="$(scripts/setup/mcp-client-venv.sh)"
export MCP_PYTHON

step "build"
cargo fetch --locked
time cargo build --locked --offline --workspace --all-targets --features "$FEATURES"

step "layers"
scripts/check/layers.sh

step "tests, network namespace with loopback only"
# Four test threads on two cores: the integration tests spend much of their time waiting on
# servers, browsers and disks (at four threads the two cores were busy 153% of the time; from
# nothing, with llama.cpp compiling beside, this command took 12 min 55 s at four against
# 15 min 37 s at two: docs/BENCHMARKS.md, "First run").
export RUST_TEST_THREADS="${RUST_TEST_THREADS:-4}"
run_tests="ip link set lo up && cargo test --locked --offline --workspace --features $FEATURES --all-targets && cargo test --locked --offline --workspace --features $FEATURES --doc"
status=0
if [ "$(id -u)" = 0 ]; then
  unshare --net bash -c "$run_tests" || status=$?
else
  unshare --map-root-user --net bash -c "$run_tests" || status=$?
fi
wait "$llama_pid" || true
exit "$status"
