#!/usr/bin/env python3
"""Sign in to the test OpenID Connect provider without a browser, for API tests.

Runs the real authorization-code flow with PKCE (S256) against the provider started by
scripts/sso/oidc-launch.sh (Glewlwyd), doing what its login page does in a browser: GET the
authorize URL (which sends a stranger to the login page), POST the person's credentials to the
login API (a session cookie comes back), PUT the consent to the client's scopes, GET the
authorize URL again and take the `code` from the redirect's Location (nothing needs to listen
on the redirect URI; redirects are never followed), then exchange the code at the token
endpoint. Prints the token response (id_token, access_token, ...) as JSON on stdout.

    scripts/sso/oidc-login.py ISSUER USER PASSWORD
    scripts/sso/oidc-login.py --authorize-url URL ISSUER USER PASSWORD

With --authorize-url it signs in at that URL (one an application built, carrying its own
state, nonce and PKCE challenge) and prints {"code": ..., "state": ...} instead: the
application then exchanges the code itself. Settings from the environment: OIDC_CLIENT_ID
(ragbox), OIDC_CLIENT_SECRET_FILE (the launcher's DIR/client-secret; none for a public client),
OIDC_REDIRECT (http://127.0.0.1:7071/auth/oidc/callback), OIDC_SCOPES ("openid profile email").
Exit 1 with a message on stderr when a step fails. Python stdlib only.
"""

import base64
import hashlib
import http.cookiejar
import json
import secrets
import sys
import urllib.error
import urllib.parse
import urllib.request
import os


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def fail(msg):
    sys.exit(f"[oidc-login] {msg}")


def main(argv):
    authorize_url = None
    if argv[:1] == ["--authorize-url"] and len(argv) >= 2:
        authorize_url, argv = argv[1], argv[2:]
    if len(argv) != 3:
        sys.exit(__doc__)
    issuer, user, password = argv
    issuer = issuer.rstrip("/")
    client_id = os.environ.get("OIDC_CLIENT_ID", "ragbox")
    redirect = os.environ.get("OIDC_REDIRECT", "http://127.0.0.1:7071/auth/oidc/callback")
    scopes = os.environ.get("OIDC_SCOPES", "openid profile email")
    secret_file = os.environ.get("OIDC_CLIENT_SECRET_FILE")
    secret = open(secret_file).read().strip() if secret_file else None

    jar = http.cookiejar.CookieJar()
    web = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                      urllib.request.HTTPCookieProcessor(jar), NoRedirect())

    def send(method, url, body=None, headers=None, want=(200,)):
        req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
        try:
            resp = web.open(req, timeout=10)
        except urllib.error.HTTPError as e:
            resp = e
        except urllib.error.URLError as e:
            fail(f"{method} {url.split('?')[0]}: {e.reason}")
        data = resp.read()
        if resp.status not in want:
            fail(f"{method} {url.split('?')[0]}: HTTP {resp.status} {data[:300]!r}")
        return resp.status, resp.headers, data

    _, _, disc = send("GET", issuer + "/.well-known/openid-configuration")
    disc = json.loads(disc)
    verifier = None
    if authorize_url is None:
        verifier = secrets.token_urlsafe(48)
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        authorize_url = disc["authorization_endpoint"] + "?" + urllib.parse.urlencode({
            "response_type": "code", "client_id": client_id, "redirect_uri": redirect, "scope": scopes,
            "state": secrets.token_urlsafe(16), "nonce": secrets.token_urlsafe(16),
            "code_challenge": challenge, "code_challenge_method": "S256"})
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(authorize_url).query))
    client_id = query.get("client_id", client_id)
    redirect = query.get("redirect_uri", redirect)

    # Glewlwyd's API root: the authorize endpoint is API/PLUGIN/auth.
    api = disc["authorization_endpoint"].rstrip("/").rsplit("/", 2)[0]

    def authorize(url):
        status, headers, _ = send("GET", url, want=(302, 303))
        return headers.get("Location", "")

    location = authorize(authorize_url)
    if not location.startswith(redirect):
        # The login page: sign in as the page's script would, consent to the scopes, and go back
        # to the page's callback_url marked `g_continue` (the page's "continue" button).
        login = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(location).query))
        back = login.get("callback_url", authorize_url) + "&g_continue"
        body = json.dumps({"username": user, "password": password}).encode()
        status, _, data = send("POST", api + "/auth/", body, {"Content-Type": "application/json"}, want=(200, 401))
        if status == 401:
            fail(f"the provider refused {user}'s password")
        body = json.dumps({"scope": query.get("scope", scopes)}).encode()
        send("PUT", f"{api}/auth/grant/{urllib.parse.quote(client_id)}", body, {"Content-Type": "application/json"})
        location = authorize(urllib.parse.urljoin(location, back))
    if not location.startswith(redirect):
        fail(f"the provider did not redirect to {redirect} after sign-in (it went to {location.split('?')[0]})")
    params = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(location).query))
    if "error" in params:
        fail(f"the provider answered {params['error']}: {params.get('error_description', '')}")
    if "code" not in params:
        fail("the redirect carried no code")
    if verifier is None:
        print(json.dumps({"code": params["code"], "state": params.get("state")}))
        return

    form = {"grant_type": "authorization_code", "code": params["code"], "redirect_uri": redirect,
            "code_verifier": verifier, "client_id": client_id}
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    if secret:
        basic = f"{urllib.parse.quote(client_id, safe='')}:{urllib.parse.quote(secret, safe='')}"
        headers["Authorization"] = "Basic " + base64.b64encode(basic.encode()).decode()
    _, _, data = send("POST", disc["token_endpoint"], urllib.parse.urlencode(form).encode(), headers)
    print(json.dumps(json.loads(data), indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
