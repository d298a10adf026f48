#!/usr/bin/env bash
# A fresh OpenID Connect provider for the OIDC sign-in tests (crates/server/src/sso/oidc.rs):
# Glewlwyd 2.7 (install it with scripts/setup/oidc-provider.sh) with everything under DIR:
# DIR/glewlwyd.conf, the SQLite database DIR/glewlwyd.db, a fresh RSA signing key DIR/sign.key
# (+ sign.pub), DIR/client-secret, DIR/provider.pid and DIR/provider.log. It listens on
# 127.0.0.1:PORT only, needs no network but loopback, and prints the issuer URL once its
# discovery document answers (exit 1 with the log's tail when it does not within 20 s). An
# earlier instance in the same DIR is stopped first; the database is made anew each time.
#
#   scripts/sso/oidc-launch.sh DIR PORT        # prints http://127.0.0.1:PORT/api/oidc
#   kill "$(cat DIR/provider.pid)"             # to stop it
#
# Discovery: ISSUER/.well-known/openid-configuration. People (password, groups): alice/alice-pw
# (hr), bob/bob-pw (legal), carol/carol-pw (none), dave/dave-pw (hr, legal). Client `ragbox`:
# confidential (secret in DIR/client-secret; client_secret_basic or client_secret_post),
# authorization code with PKCE S256 (PKCE is allowed, not required), also the password grant;
# redirect URI $OIDC_REDIRECT (default http://127.0.0.1:7071/auth/oidc/callback; Glewlwyd
# matches it exactly, so set the one the test's server uses). Scopes openid, profile, email.
# Tokens are signed RS256 (kid: the key's thumbprint). The ID token (aud "ragbox") carries
# `preferred_username`, `name`, `email` and `groups` (an array; absent for carol). The access
# token is a JWT too (typ at+jwt, same sub) with `preferred_username`, but its `aud` is the
# granted scopes as one string ("openid profile email", Glewlwyd's choice) and it carries no
# groups: Glewlwyd 2.7 can only add a multi-valued property to access tokens comma-joined
# ("hr,legal"), which would read as one group, so it is left out. Use the ID token as the
# bearer when groups matter.
# Admin API: admin/password (the package's default; loopback only).
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 DIR PORT" >&2
  exit 2
fi
GLEWLWYD=/usr/bin/glewlwyd
SCHEMA=/usr/share/dbconfig-common/data/glewlwyd/install/sqlite3
mkdir -p "$1"
DIR="$(cd "$1" && pwd)"
PORT="$2"
BASE="http://127.0.0.1:$PORT"
ISSUER="$BASE/api/oidc"
REDIRECT="${OIDC_REDIRECT:-http://127.0.0.1:7071/auth/oidc/callback}"

for tool in "$GLEWLWYD" sqlite3 openssl python3; do
  if ! command -v "$tool" >/dev/null 2>&1 || [ ! -f "$SCHEMA" ]; then
    echo "[oidc-launch] $tool or $SCHEMA is missing: run scripts/setup/oidc-provider.sh" >&2
    exit 1
  fi
done

# Stop this DIR's earlier instance, if it still runs.
if [ -f "$DIR/provider.pid" ]; then
  old="$(cat "$DIR/provider.pid" 2>/dev/null || true)"
  if [ -n "$old" ] && [ "$(cat "/proc/$old/comm" 2>/dev/null || true)" = glewlwyd ]; then
    kill "$old" 2>/dev/null || true
    for _ in $(seq 100); do [ -d "/proc/$old" ] || break; sleep 0.1; done
  fi
  rm -f "$DIR/provider.pid"
fi
if python3 -c "import socket,sys; s=socket.socket(); s.settimeout(1); sys.exit(s.connect_ex(('127.0.0.1', $PORT)) != 0)"; then
  echo "[oidc-launch] something already listens on 127.0.0.1:$PORT; choose another port" >&2
  exit 1
fi
rm -f "$DIR/glewlwyd.db" "$DIR/glewlwyd.conf" "$DIR/provider.log"

# A signing key of this instance's own; kept across calls in the same DIR.
if [ ! -s "$DIR/sign.key" ]; then
  openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$DIR/sign.key" 2>/dev/null
  openssl pkey -in "$DIR/sign.key" -pubout -out "$DIR/sign.pub"
  chmod 600 "$DIR/sign.key"
fi
if [ ! -s "$DIR/client-secret" ]; then
  (umask 077; openssl rand -hex 24 >"$DIR/client-secret")
fi

sqlite3 "$DIR/glewlwyd.db" <"$SCHEMA"
# The web login UI: Glewlwyd serves no symlink that leaves static_files_path (and Debian's
# webapp is mostly symlinks: jquery, bootstrap, popper, fork-awesome, config.json -> a folder
# /etc/glewlwyd/config-2.7.json/ holding config.json), so serve a dereferenced copy.
rm -rf "$DIR/webapp"
mkdir -p "$DIR/webapp"
for f in /usr/share/glewlwyd/webapp/*; do
  [ "$(basename "$f")" = config.json ] || cp -rL "$f" "$DIR/webapp/"
done
cfg=/usr/share/glewlwyd/webapp/config.json
[ -d "$cfg" ] && cfg="$cfg/config.json"
cp -L "$cfg" "$DIR/webapp/config.json"
# The user backend keeps a multi-valued `group` property, the client backend the client's
# redirect URIs and grant types (the package's defaults plus `group`).
sqlite3 "$DIR/glewlwyd.db" "UPDATE g_user_module_instance SET gumi_parameters = json_set(gumi_parameters, '\$.\"data-format\".group', json('{\"multiple\":true,\"read\":true,\"write\":true,\"profile-read\":true,\"profile-write\":false}')) WHERE gumi_name = 'database';"

cat >"$DIR/glewlwyd.conf" <<EOF
port=$PORT
bind_address="127.0.0.1"
external_url="$BASE"
login_url="login.html"
static_files_path="$DIR/webapp/"
static_files_prefix="login"
api_prefix="api"
allow_origin="*"
log_mode="file"
log_level="${OIDC_LOG_LEVEL:-INFO}"
log_file="$DIR/provider.log"
cookie_secure=0
cookie_same_site="empty"
session_expiration=3600
session_key="GLEWLWYD2_SESSION_ID"
admin_session_authentication="cookie"
profile_session_authentication="cookie"
allow_multiple_user_per_session=true
login_api_enabled=true
add_x_frame_option_header_deny=true
admin_scope="g_admin"
profile_scope="g_profile"
user_module_path="/usr/lib/glewlwyd/user"
client_module_path="/usr/lib/glewlwyd/client"
user_auth_scheme_module_path="/usr/lib/glewlwyd/scheme"
plugin_module_path="/usr/lib/glewlwyd/plugin"
hash_algorithm="SHA512"
static_files_mime_types =
(
  {
    extension = ".html"
    mime_type = "text/html"
  },
  {
    extension = ".css"
    mime_type = "text/css"
  },
  {
    extension = ".js"
    mime_type = "application/javascript"
  },
  {
    extension = ".json"
    mime_type = "application/json"
  },
  {
    extension = ".png"
    mime_type = "image/png"
  },
  {
    extension = ".jpg"
    mime_type = "image/jpeg"
  },
  {
    extension = ".jpeg"
    mime_type = "image/jpeg"
  },
  {
    extension = ".ttf"
    mime_type = "font/ttf"
  },
  {
    extension = ".woff"
    mime_type = "font/woff"
  },
  {
    extension = ".woff2"
    mime_type = "font/woff2"
  },
  {
    extension = ".otf"
    mime_type = "font/otf"
  },
  {
    extension = ".eot"
    mime_type = "application/vnd.ms-fontobject"
  },
  {
    extension = ".map"
    mime_type = "application/octet-stream"
  },
  {
    extension = ".ico"
    mime_type = "image/x-icon"
  }
)
database =
{
  type = "sqlite3"
  path = "$DIR/glewlwyd.db"
};
EOF

# The port is passed on the command line too.
"$GLEWLWYD" --config-file="$DIR/glewlwyd.conf" --port="$PORT" </dev/null >>"$DIR/provider.log" 2>&1 &
echo $! >"$DIR/provider.pid"

fail() {
  echo "[oidc-launch] $1; the log's tail ($DIR/provider.log):" >&2
  tail -n 30 "$DIR/provider.log" >&2 || true
  kill "$(cat "$DIR/provider.pid")" 2>/dev/null || true
  rm -f "$DIR/provider.pid"
  exit 1
}

# Seed people, scopes, the client and the OIDC plugin through the admin API, then wait for the
# discovery document.
DIR="$DIR" BASE="$BASE" ISSUER="$ISSUER" REDIRECT="$REDIRECT" PID="$(cat "$DIR/provider.pid")" python3 - <<'PY' || fail "seeding the provider failed"
import http.cookiejar, json, os, sys, time, urllib.error, urllib.request

base, issuer, d = os.environ["BASE"], os.environ["ISSUER"], os.environ["DIR"]
opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()),
                                     urllib.request.ProxyHandler({}))

def call(method, path, body=None, ok=(200,)):
    req = urllib.request.Request(base + "/api" + path, method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with opener.open(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        if e.code in ok:
            return e.code, e.read()
        sys.exit(f"{method} {path}: HTTP {e.code} {e.read()[:500]!r}")

deadline = time.time() + 20
while True:
    if not os.path.isdir(f"/proc/{os.environ['PID']}"):
        sys.exit("glewlwyd exited")
    try:
        call("POST", "/auth/", {"username": "admin", "password": "password"})
        break
    except (urllib.error.URLError, ConnectionError, OSError):
        if time.time() > deadline:
            sys.exit("the admin API did not answer within 20 s")
        time.sleep(0.2)

for name in ("profile", "email"):
    call("POST", "/scope/", {"name": name, "display_name": name, "description": name,
                             "password_required": True, "password_max_age": 0, "scheme": {}})
call("PUT", "/scope/openid", {"name": "openid", "display_name": "Open ID", "description": "OpenID Connect",
                              "password_required": True, "password_max_age": 0, "scheme": {}})

people = {"alice": ["hr"], "bob": ["legal"], "carol": [], "dave": ["hr", "legal"]}
for user, groups in people.items():
    body = {"username": user, "name": user.capitalize(), "email": f"{user}@ragbox.test",
            "password": f"{user}-pw", "enabled": True, "scope": ["openid", "profile", "email"]}
    if groups:
        body["group"] = groups
    call("POST", "/user/", body)

secret = open(os.path.join(d, "client-secret")).read().strip()
call("POST", "/client/", {
    "client_id": "ragbox", "name": "ragbox", "description": "ragbox OIDC sign-in tests",
    "confidential": True, "password": secret, "client_secret": secret, "enabled": True,
    "redirect_uri": [os.environ["REDIRECT"]], "scope": [],
    "authorization_type": ["code", "password", "refresh_token"],
    "token_endpoint_auth_method": ["client_secret_basic", "client_secret_post"],
})

key, pub = (open(os.path.join(d, f)).read() for f in ("sign.key", "sign.pub"))
claim = lambda name, prop: {"name": name, "user-property": prop, "type": "string",
                            "boolean-value-true": "", "boolean-value-false": "",
                            "mandatory": True, "on-demand": False, "scope": []}
call("POST", "/mod/plugin/", {"module": "oidc", "name": "oidc", "display_name": "OIDC", "enabled": True, "parameters": {
    "iss": issuer, "jwt-type": "rsa", "jwt-key-size": "256", "key": key, "cert": pub,
    "jwks-show": True, "jwks-x5c": [], "secret-type": "public",
    "access-token-duration": 3600, "refresh-token-duration": 86400, "code-duration": 600,
    "refresh-token-rolling": False, "allow-non-oidc": True,
    "auth-type-code-enabled": True, "auth-type-token-enabled": False, "auth-type-id-token-enabled": True,
    "auth-type-none-enabled": False, "auth-type-password-enabled": True, "auth-type-client-enabled": False,
    "auth-type-device-enabled": False, "auth-type-refresh-enabled": True,
    "scope": [], "additional-parameters": [{"user-parameter": "username", "token-parameter": "preferred_username", "token-changed": True}], "allowed-scope": ["openid", "profile", "email"],
    "name-claim": "mandatory", "name-claim-scope": [], "email-claim": "mandatory", "email-claim-scope": [],
    "scope-claim": "no", "scope-claim-scope": [],
    "claims": [claim("preferred_username", "username"), claim("groups", "group")],
    "address-claim": {"type": "no", "formatted": "", "street_address": "", "locality": "", "region": "",
                      "postal_code": "", "country": "", "mandatory": False},
    "pkce-allowed": True, "pkce-method-plain-allowed": False,
    "introspection-revocation-allowed": False, "register-client-allowed": False,
    "session-management-allowed": False, "request-parameter-allow": False,
    "encrypt-out-token-allow": False, "oauth-dpop-allowed": False, "resource-allowed": False,
    "oauth-rar-allowed": False, "oauth-par-allowed": False, "oauth-ciba-allowed": False,
}})

url = issuer + "/.well-known/openid-configuration"
while True:
    try:
        with opener.open(url, timeout=2) as r:
            if json.load(r).get("issuer") == issuer:
                break
    except (urllib.error.URLError, ConnectionError, OSError, ValueError):
        pass
    if time.time() > deadline:
        sys.exit(f"{url} did not answer within 20 s")
    time.sleep(0.2)
PY

echo "$ISSUER"
