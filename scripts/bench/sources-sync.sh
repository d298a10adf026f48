#!/usr/bin/env bash
# The unchanged-mailbox sync benchmark: a Dovecot on loopback (scripts/sources/imap-launch.sh)
# with N generated messages (default 1000, every third with an attachment), synced once by
# `ragbox sync` (fetch, parse, embed), then timed: `ragbox sync` again with nothing changed, side
# by side with `ragbox ingest` of the same mirror as a plain local folder (what a user would run
# on a mailbox exported to disk). Prints the seconds of each; docs/BENCHMARKS.md has the figures.
#
#   scripts/bench/sources-sync.sh [N]        # after a build (the binary in $CARGO_TARGET_DIR/debug)
set -euo pipefail
N="${1:-1000}"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BIN="${CARGO_TARGET_DIR:-$HOME/.cache/ragbox/target}/debug/ragbox"
DIR="$(mktemp -d /tmp/ragbox-bench-src.XXXX)"
chmod o+x "$DIR"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$ROOT/scripts/sources/imap-launch.sh" "$DIR/imap" "$PORT" >/dev/null
trap 'kill "$(cat "$DIR/imap/dovecot.pid")" 2>/dev/null || true' EXIT
python3 "$ROOT/scripts/sources/imap-fill.py" 127.0.0.1 "$PORT" archive archive-pw INBOX --generate "$N" >/dev/null
echo archive-pw > "$DIR/pw"
cat > "$DIR/config.toml" <<TOML
[[sources]]
name = "mail"
kind = "imap"
host = "127.0.0.1"
port = $PORT
user = "archive"
password_file = "$DIR/pw"
tls = "starttls"
ca_file = "$DIR/imap/tls/ca.pem"
folders = ["INBOX"]
TOML
export RAGBOX_DATA_DIR="$DIR/data" RAGBOX_MODELS_DIR="${RAGBOX_MODELS_DIR:-$ROOT/models}"
t() { local s e; s=$(date +%s.%N); "$@" >/dev/null; e=$(date +%s.%N); python3 -c "print(f'{$e-$s:.2f}')"; }
echo "first sync of $N messages (fetch, parse, embed): $(t "$BIN" --quiet --config "$DIR/config.toml" sync) s"
for i in 1 2 3; do
  echo "unchanged sync ($i): $(t "$BIN" --quiet --config "$DIR/config.toml" sync) s"
  echo "unchanged ingest of the mirror as a local folder ($i): $(t "$BIN" --quiet --config "$DIR/config.toml" ingest "$DIR/data/sources/mail") s"
done
rm -rf "$DIR"
