#!/usr/bin/env bash
# The unchanged-source sync benchmarks, each `ragbox sync` a whole process, side by side with what a
# user would otherwise run: `ragbox ingest` of the same files as a plain local folder.
#
#   imap: a Dovecot on loopback (scripts/sources/imap-launch.sh) with N generated messages (every
#         third with an attachment); the local folder is the mirror (a mailbox exported to disk).
#   smb:  a Samba smbd on loopback (scripts/sources/smb-launch.sh) sharing N small markdown files
#         in 20 folders; the local folder is the shared folder itself.
#
# Each is synced once (fetch, parse, embed), then timed three times unchanged. Prints the seconds
# of each; docs/BENCHMARKS.md has the figures.
#
#   scripts/bench/sources-sync.sh [imap|smb] [N]   # after a build (the binary in $CARGO_TARGET_DIR/debug)
set -euo pipefail
KIND=imap
case "${1:-}" in imap|smb) KIND="$1"; shift ;; esac
N="${1:-1000}"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BIN="${CARGO_TARGET_DIR:-$HOME/.cache/ragbox/target}/debug/ragbox"
DIR="$(mktemp -d /tmp/ragbox-bench-src.XXXX)"
chmod o+x "$DIR"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
if [ "$KIND" = imap ]; then
  "$ROOT/scripts/sources/imap-launch.sh" "$DIR/imap" "$PORT" >/dev/null
  trap 'kill "$(cat "$DIR/imap/dovecot.pid")" 2>/dev/null || true; rm -rf "$DIR"' EXIT
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
  NAME=mail; WHAT=messages; LOCAL="$DIR/data/sources/mail"
else
  python3 - "$DIR/share" "$N" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    folder = os.path.join(root, f"dept{i % 20:02}")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"note-{i:05}.md"), "w") as f:
        f.write(f"# Note {i}\n\nRecord {i} of the share: the procedure for item {i * 7919 % 10007} is reviewed yearly.\n")
PY
  "$ROOT/scripts/sources/smb-launch.sh" "$DIR/smb" "$PORT" "$DIR/share" 2>/dev/null
  trap 'kill $(cat "$DIR/smb/smbd.pid" 2>/dev/null) 2>/dev/null || true; sleep 0.5; rm -rf "$DIR"' EXIT
  echo reader-pw > "$DIR/pw"
  cat > "$DIR/config.toml" <<TOML
[[sources]]
name = "share"
kind = "smb"
host = "127.0.0.1"
port = $PORT
user = "reader"
password_file = "$DIR/pw"
share = "docs"
TOML
  NAME=share; WHAT=files; LOCAL="$DIR/share"
fi
export RAGBOX_DATA_DIR="$DIR/data" RAGBOX_MODELS_DIR="${RAGBOX_MODELS_DIR:-$ROOT/models}"
t() { local s e; s=$(date +%s.%N); "$@" >/dev/null; e=$(date +%s.%N); python3 -c "print(f'{$e-$s:.2f}')"; }
echo "first sync of $N $WHAT (fetch, parse, embed): $(t "$BIN" --quiet --config "$DIR/config.toml" sync "$NAME") s"
# The local folder's own first ingest, in a catalog of its own, so that the timed ones are unchanged.
RAGBOX_DATA_DIR="$DIR/local-data" "$BIN" --quiet ingest "$LOCAL" >/dev/null
for i in 1 2 3 4 5; do
  echo "unchanged sync ($i): $(t "$BIN" --quiet --config "$DIR/config.toml" sync "$NAME") s"
  echo "unchanged ingest of the same $WHAT as a local folder ($i): $(RAGBOX_DATA_DIR="$DIR/local-data" t "$BIN" --quiet ingest "$LOCAL") s"
done
