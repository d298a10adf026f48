#!/usr/bin/env bash
# A fresh Dovecot IMAP server for the mailbox-source tests (`[[sources]]` of kind imap),
# with its whole configuration under DIR: DIR/dovecot.conf (generated), DIR/users (the passwd-file
# that is both passdb and userdb), the mail in DIR/mail/USER/Maildir (Maildir++, IMAP hierarchy
# separator "/"), sockets and state in DIR/run and DIR/state, DIR/dovecot.log, DIR/dovecot.pid, and
# a throwaway CA and server certificate made by openssl in DIR/tls (ca.pem is the one to trust;
# kept across launches). It listens on 127.0.0.1 only: IMAP on PORT with STARTTLS offered (plain
# LOGIN without TLS is allowed too, so a test can choose) and, given TLS_PORT, implicit TLS
# (imaps) there. It runs as the caller (root in the tests): the mail belongs to the system user
# `vmail` (Dovecot serves no mail as root), the login processes run as `dovenull`, the internal
# ones as `dovecot` (the package's users; any missing is created here), so DIR's parents must be
# traversable by others (DIR itself is made so). It needs no network but loopback, and returns
# once a LOGIN over STARTTLS and a SELECT of INBOX work (python3's imaplib), or exits 1 with the
# log's tail when they do not within 10 s (stopping takes 2-3 s: wait for the pid to go). A running
# instance of an earlier call in the same DIR is stopped first. The mailbox starts empty on each
# launch unless IMAP_KEEP_MAIL=1 (keeps DIR/mail, and so UIDVALIDITY and UIDs, across a restart:
# the "server unreachable, then back" tests). Fill it with scripts/sources/imap-fill.py; install
# Dovecot with scripts/setup/mail-server.sh.
#
#   scripts/sources/imap-launch.sh DIR PORT [TLS_PORT]
#   kill "$(cat DIR/dovecot.pid)"        # to stop it (the master, run with -F, takes its children
#                                        # down; `doveadm -c DIR/dovecot.conf stop` works as well)
#
# One user: archive / archive-pw. IMAP_DEBUG=1 logs authentication and mail debugging to the log.
# Keep DIR short (under ~70 characters): Dovecot's unix sockets live in DIR/run.
set -euo pipefail
if [ $# -lt 2 ] || [ $# -gt 3 ]; then
  echo "usage: $0 DIR PORT [TLS_PORT]" >&2
  exit 2
fi
DOVECOT=/usr/sbin/dovecot
mkdir -p "$1"
DIR="$(cd "$1" && pwd)"
PORT="$2"
TLS_PORT="${3:-}"
USER_NAME=archive
USER_PW=archive-pw

if [ ! -x "$DOVECOT" ] || [ ! -e /usr/lib/dovecot/imap ] || ! command -v python3 >/dev/null 2>&1 \
   || ! command -v openssl >/dev/null 2>&1; then
  echo "[imap-launch] dovecot, python3 or openssl is missing: run scripts/setup/mail-server.sh" >&2
  exit 1
fi

# Dovecot's unprivileged users (the package makes them; a bare system may lack them), and `vmail`,
# which owns the mail: Dovecot refuses to serve mail as root.
for u in dovenull dovecot vmail; do
  if ! id "$u" >/dev/null 2>&1; then
    useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$u"
  fi
done

# Stop this DIR's earlier instance, if it still runs.
if [ -f "$DIR/dovecot.pid" ]; then
  old="$(cat "$DIR/dovecot.pid" 2>/dev/null || true)"
  if [ -n "$old" ] && [ "$(cat "/proc/$old/comm" 2>/dev/null || true)" = dovecot ]; then
    kill "$old" 2>/dev/null || true
    for _ in $(seq 100); do [ -d "/proc/$old" ] || break; sleep 0.1; done
  fi
  rm -f "$DIR/dovecot.pid"
fi
# Is anything (another server, or a leftover of ours) already on the port(s)?
for p in "$PORT" $TLS_PORT; do
  if python3 -c 'import socket,sys; s=socket.socket(); s.settimeout(1); s.connect(("127.0.0.1", int(sys.argv[1])))' "$p" 2>/dev/null; then
    echo "[imap-launch] something already listens on 127.0.0.1:$p; choose another port" >&2
    exit 1
  fi
done
rm -rf "$DIR/run" "$DIR/state" "$DIR/dovecot.conf" "$DIR/dovecot.log" "$DIR/users"
if [ "${IMAP_KEEP_MAIL:-0}" != 1 ]; then rm -rf "$DIR/mail"; fi
mkdir -p "$DIR/run" "$DIR/state" "$DIR/mail/$USER_NAME"
chown -R vmail:vmail "$DIR/mail"
# `vmail` and `dovecot` must reach DIR/mail and DIR/users: DIR is opened to traversal (not to
# listing), and its parents must be already (a 0700 temporary folder above it is not).
chmod o+x "$DIR"
p="$(dirname "$DIR")"
while [ "$p" != / ]; do
  if [ "$(( $(stat -c %#a "$p") & 1 ))" = 0 ]; then
    echo "[imap-launch] $p is not traversable by others (o+x): Dovecot's users cannot reach $DIR" >&2
    exit 1
  fi
  p="$(dirname "$p")"
done

if [ ! -s "$DIR/tls/server.pem" ] || [ ! -s "$DIR/tls/dh.pem" ]; then
  mkdir -p "$DIR/tls"
  (
    cd "$DIR/tls"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=ragbox test CA" \
      -keyout ca.key -out ca.pem \
      -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
    openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout server.key -out server.csr
    printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
      "extendedKeyUsage=serverAuth" "subjectAltName=IP:127.0.0.1,DNS:localhost" > server.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile server.ext -out server.pem
    # Dovecot 2.3 wants DH parameters for DHE suites; the RFC 7919 group is instant to write.
    openssl genpkey -genparam -algorithm DH -pkeyopt dh_param:ffdhe2048 -out dh.pem
  ) >/dev/null 2>&1
fi

# passwd-file: user:password:uid:gid:gecos:home:shell. No uid/gid here (the file refuses 0): the
# mail belongs to `vmail` through mail_uid/mail_gid below.
printf '%s:{PLAIN}%s::::%s::\n' "$USER_NAME" "$USER_PW" "$DIR/mail/$USER_NAME" > "$DIR/users"
# Read by the auth process, which runs as `dovecot`.
chgrp dovecot "$DIR/users" && chmod 640 "$DIR/users"

IMAPS_PORT="${TLS_PORT:-0}"
DEBUG=no
if [ "${IMAP_DEBUG:-0}" = 1 ]; then DEBUG=yes; fi
cat > "$DIR/dovecot.conf" <<CONF
# Generated by scripts/sources/imap-launch.sh; rewritten on each launch. Nothing from /etc/dovecot.
instance_name = ragbox-imap-$PORT
base_dir = $DIR/run
state_dir = $DIR/state
log_path = $DIR/dovecot.log
protocols = imap
listen = 127.0.0.1
default_internal_user = dovecot
default_login_user = dovenull
# The mail user (Dovecot will not serve mail as root).
mail_uid = vmail
mail_gid = vmail
first_valid_uid = 1
first_valid_gid = 1
mail_location = maildir:~/Maildir
# A throwaway mailbox: no fsync, so that filling 1,000 messages takes seconds.
mail_fsync = never
namespace inbox {
  inbox = yes
  separator = /
}
ssl = yes
ssl_cert = <$DIR/tls/server.pem
ssl_key = <$DIR/tls/server.key
ssl_dh = <$DIR/tls/dh.pem
ssl_min_protocol = TLSv1.2
disable_plaintext_auth = no
auth_mechanisms = plain login
auth_debug = $DEBUG
mail_debug = $DEBUG
passdb {
  driver = passwd-file
  args = scheme=PLAIN username_format=%u $DIR/users
}
userdb {
  driver = passwd-file
  args = username_format=%u $DIR/users
}
service imap-login {
  inet_listener imap {
    address = 127.0.0.1
    port = $PORT
  }
  inet_listener imaps {
    address = 127.0.0.1
    port = $IMAPS_PORT
    ssl = yes
  }
}
# No POP3/LMTP/submission; keep the helpers off the network.
service lmtp {
  unix_listener lmtp {
    mode = 0
  }
}
CONF

# -F keeps the master in the foreground, so $! is its pid; setsid detaches it from the caller.
setsid "$DOVECOT" -F -c "$DIR/dovecot.conf" >>"$DIR/dovecot.log" 2>&1 </dev/null &
child=$!
echo "$child" > "$DIR/dovecot.pid"

check() {
  python3 - "$PORT" "$TLS_PORT" "$DIR/tls/ca.pem" "$USER_NAME" "$USER_PW" <<'PY' 2>/dev/null
import imaplib, ssl, sys
port, tls_port, ca, user, pw = sys.argv[1:6]
ctx = ssl.create_default_context(cafile=ca)
m = imaplib.IMAP4("127.0.0.1", int(port), timeout=2)
m.starttls(ssl_context=ctx)
m.login(user, pw)
if m.select("INBOX", readonly=True)[0] != "OK":
    sys.exit(1)
m.logout()
if tls_port:
    m = imaplib.IMAP4_SSL("127.0.0.1", int(tls_port), ssl_context=ctx, timeout=2)
    m.login(user, pw)
    m.logout()
PY
}

deadline=$((SECONDS + 10))
while [ "$SECONDS" -lt "$deadline" ]; do
  if ! kill -0 "$child" 2>/dev/null; then
    echo "[imap-launch] dovecot exited; its log:" >&2; tail -20 "$DIR/dovecot.log" >&2
    rm -f "$DIR/dovecot.pid"; exit 1
  fi
  if check; then
    echo "[imap-launch] dovecot $child answers on imap://127.0.0.1:$PORT (STARTTLS)${TLS_PORT:+ and imaps://127.0.0.1:$TLS_PORT} as $USER_NAME/$USER_PW" >&2
    exit 0
  fi
  sleep 0.1
done
echo "[imap-launch] dovecot does not accept a LOGIN on 127.0.0.1:$PORT after 10 s; its log:" >&2
tail -20 "$DIR/dovecot.log" >&2
kill "$child" 2>/dev/null || true
for _ in $(seq 100); do [ -d "/proc/$child" ] || break; sleep 0.1; done
rm -f "$DIR/dovecot.pid"
exit 1
