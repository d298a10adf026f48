//! OpenID Connect against a real provider: Debian's Glewlwyd 2.7 (scripts/setup/oidc-provider.sh),
//! started here on loopback with its test users (scripts/sso/oidc-launch.sh) and signed into
//! through its own login API (scripts/sso/oidc-login.py, what its login page does) and, in
//! `sign_in_to_first_answer_in_a_real_browser`, through its login page in Chromium.
//!
//! `provider_round_trip`: discovery, the code flow with PKCE and the ID token's checks (nonce,
//! replay, tampering, a wrong client secret), bearer tokens, the host allowlist, an unreachable
//! provider. `people_sign_in_through_the_provider`: `ragbox serve` sends the browser to the
//! provider and takes it back (`/auth/oidc/start`, `/auth/oidc/callback`), the person's groups
//! decide what they read, scripts use the provider's ID token as a bearer, sign-out ends it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use ragbox_server::sso::oidc::{OidcError, Provider};
use ragbox_service::config::OidcSection;
use serde_json::Value;

use crate::access::{audit_of, corpus, free_port, ingest, no_legal, with_cookie, HR_QUESTION, LEGAL_QUESTION};
use crate::server::{spawn_at, Server};

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/sso").join(name)
}

/// A Glewlwyd of the test users on a free loopback port, stopped on drop.
pub(crate) struct OidcProvider {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) issuer: String,
}

impl Drop for OidcProvider {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(self.dir.path().join("provider.pid")) {
            unsafe { libc::kill(pid.trim().parse().unwrap_or(0), libc::SIGTERM) };
        }
    }
}

/// Starts the provider; `redirect` is the one callback its `ragbox` client accepts.
pub(crate) fn provider(redirect: &str) -> OidcProvider {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(script("oidc-launch.sh")).arg(dir.path()).arg(free_port().to_string()).env("OIDC_REDIRECT", redirect).output().unwrap();
    assert!(
        out.status.success(),
        "the provider did not start (scripts/setup/oidc-provider.sh installs it):\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    OidcProvider { issuer: String::from_utf8(out.stdout).unwrap().trim().to_string(), dir }
}

/// `oidc-login.py ARGS`: the provider's login, as its page does it; the JSON it prints.
fn login(p: &OidcProvider, redirect: &str, args: &[&str]) -> Value {
    let out = Command::new(script("oidc-login.py"))
        .args(args)
        .env("OIDC_CLIENT_SECRET_FILE", p.dir.path().join("client-secret"))
        .env("OIDC_REDIRECT", redirect)
        .output()
        .unwrap();
    assert!(out.status.success(), "login: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn settings(p: &OidcProvider, redirect: &str) -> OidcSection {
    OidcSection {
        issuer: p.issuer.clone(),
        client_id: "ragbox".into(),
        client_secret_file: Some(p.dir.path().join("client-secret")),
        redirect_url: redirect.into(),
        scopes: vec!["profile".into(), "email".into()],
        groups_claim: "groups".into(),
        name_claim: "preferred_username".into(),
        // Glewlwyd's access tokens carry the granted scopes as their audience.
        audience: Some("openid profile email".into()),
        allow_hosts: vec!["127.0.0.1".into()],
        session_hours: 12,
        timeout_ms: 5000,
    }
}

#[tokio::test]
async fn provider_round_trip() {
    let redirect = "http://127.0.0.1:7071/auth/oidc/callback";
    let op = provider(redirect);
    let issuer = op.issuer.clone();
    assert!(issuer.starts_with("http://127.0.0.1:") && issuer.ends_with("/api/oidc"), "{issuer}");
    let p = Provider::discover(&settings(&op, redirect)).await.unwrap();

    // Bearer tokens from the provider's code flow.
    let tokens = login(&op, redirect, &[&issuer, "alice", "alice-pw"]);
    let id = p.verify_bearer(tokens["id_token"].as_str().unwrap()).await.unwrap();
    assert_eq!((id.name.as_str(), id.groups.clone()), ("alice", vec!["hr".to_string()]));
    assert_eq!(id.issuer, issuer);
    let at = p.verify_bearer(tokens["access_token"].as_str().unwrap()).await.unwrap();
    assert_eq!((at.subject.as_str(), at.name.as_str()), (id.subject.as_str(), "alice"));
    assert!(at.groups.is_empty(), "Glewlwyd puts no groups in access tokens (oidc-launch.sh)");
    // Tampered: one payload character changed; and the signature cut off.
    let t = tokens["id_token"].as_str().unwrap();
    let (head, rest) = t.split_once('.').unwrap();
    let flipped = match rest.strip_prefix('e') {
        Some(r) => format!("{head}.f{r}"),
        None => format!("{head}.e{}", &rest[1..]),
    };
    let e = p.verify_bearer(&flipped).await.unwrap_err();
    assert!(matches!(e, OidcError::Rejected(_)), "{e}");
    assert!(!e.to_string().contains(t), "{e}");
    let (signed, _) = t.rsplit_once('.').unwrap();
    assert!(matches!(p.verify_bearer(&format!("{signed}.")).await, Err(OidcError::Rejected(_))));
    // Without the scope-list audience the access token is someone else's; the ID token still fits.
    let mut strict = settings(&op, redirect);
    strict.audience = None;
    let strict = Provider::discover(&strict).await.unwrap();
    assert!(matches!(strict.verify_bearer(tokens["access_token"].as_str().unwrap()).await, Err(OidcError::Rejected(_))));
    assert!(strict.verify_bearer(t).await.is_ok());

    // The application's own flow: begin, sign in at its URL, finish.
    for (user, groups) in [("alice", vec!["hr"]), ("dave", vec!["hr", "legal"]), ("carol", vec![])] {
        let (url, pending) = p.begin();
        let cb = login(&op, redirect, &["--authorize-url", &url, &issuer, user, &format!("{user}-pw")]);
        assert_eq!(cb["state"], pending.state.as_str());
        let code = cb["code"].as_str().unwrap();
        let who = p.finish(&pending, code).await.unwrap();
        assert_eq!(who.name, user);
        assert_eq!(who.groups, groups);
        assert!(who.expires_at > SystemTime::now());
        // The code is used up; a second exchange is refused.
        let again = p.finish(&pending, code).await.unwrap_err();
        assert!(matches!(again, OidcError::Rejected(_)), "{again}");
        assert!(!again.to_string().contains(code));
    }
    // Another sign-in's nonce: refused.
    let (url, pending) = p.begin();
    let (_, other) = p.begin();
    let cb = login(&op, redirect, &["--authorize-url", &url, &issuer, "bob", "bob-pw"]);
    let mut wrong = other.clone();
    wrong.verifier = pending.verifier.clone();
    let e = p.finish(&wrong, cb["code"].as_str().unwrap()).await.unwrap_err();
    assert!(e.to_string().contains("nonce"), "{e}");
    // A wrong client secret: the client is refused, and the message says what to check.
    let bad = op.dir.path().join("bad-secret");
    std::fs::write(&bad, "nope").unwrap();
    let mut s = settings(&op, redirect);
    s.client_secret_file = Some(bad);
    let q = Provider::discover(&s).await.unwrap();
    let (url, pending) = q.begin();
    let cb = login(&op, redirect, &["--authorize-url", &url, &issuer, "bob", "bob-pw"]);
    let e = q.finish(&pending, cb["code"].as_str().unwrap()).await.unwrap_err();
    assert!(matches!(e, OidcError::Misconfigured(_)), "{e}");
    // A host outside the allowlist is never contacted.
    let mut s = settings(&op, redirect);
    s.allow_hosts = vec!["10.0.0.1".into()];
    assert_eq!(Provider::discover(&s).await.unwrap_err(), OidcError::NotAllowed("127.0.0.1".into()));
    // Nothing listens: unreachable, said so.
    let mut s = settings(&op, redirect);
    s.issuer = format!("http://127.0.0.1:{}/api/oidc", free_port());
    s.timeout_ms = 500;
    let e = Provider::discover(&s).await.unwrap_err();
    assert!(matches!(e, OidcError::Unreachable(_)), "{e}");
}

/// A server over the access test's corpus whose people sign in with the provider; (server,
/// provider, data, config).
pub(crate) fn oidc_server() -> (Server, OidcProvider, PathBuf, PathBuf) {
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let redirect = format!("{base}/auth/oidc/callback");
    let op = provider(&redirect);
    let dir = tempfile::tempdir().unwrap().keep();
    let corpus = corpus(&dir);
    let toml = format!(
        "[answer]\npassages = 3\n\
         [access]\nrules = [{{ path = \"**/legal/**\", groups = [\"legal\"] }}]\n\
         [[sso.groups]]\ngroup = \"hr\"\ntenant = \"default\"\nrole = \"reader\"\n\
         [[sso.groups]]\ngroup = \"legal\"\ntenant = \"default\"\nrole = \"writer\"\n\
         [sso.oidc]\nissuer = \"{}\"\nclient_id = \"ragbox\"\nclient_secret_file = \"{}\"\nredirect_url = \"{redirect}\"\n\
         allow_hosts = [\"127.0.0.1\"]\n\
         [server]\nauth_failures_per_minute = 50\n",
        op.issuer,
        op.dir.path().join("client-secret").display()
    );
    let config = dir.join("server.toml");
    std::fs::write(&config, toml).unwrap();
    let data = dir.join("data");
    ingest(&data, &config, &corpus);
    let server = spawn_at(data.clone(), config.clone(), &format!("127.0.0.1:{port}"));
    assert_eq!(server.base, base);
    (server, op, data, config)
}

/// A GET that does not follow redirects: (status, Location, Set-Cookie's cookie).
fn no_follow(url: &str) -> (u16, String, Option<String>) {
    let agent = ureq::AgentBuilder::new().redirects(0).build();
    let r = match agent.get(url).call() {
        Ok(r) | Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("GET {url}: {e}"),
    };
    let cookie = r.header("Set-Cookie").map(|c| c.split(';').next().unwrap().to_string());
    (r.status(), r.header("Location").unwrap_or_default().to_string(), cookie)
}

#[test]
fn people_sign_in_through_the_provider() {
    let (server, op, data, config) = oidc_server();
    let b = server.base.clone();
    let redirect = format!("{b}/auth/oidc/callback");
    let (s, body) = with_cookie("GET", &format!("{b}/web/sso"), &b, "x=y", None);
    assert_eq!((s, serde_json::from_str::<Value>(&body).unwrap()), (200, serde_json::json!({ "ldap": false, "oidc": true })));

    // The page's button: to the provider with PKCE, back with a code, signed in.
    let sign_in = |user: &str| -> String {
        let (s, to, _) = no_follow(&format!("{b}/auth/oidc/start"));
        assert_eq!(s, 303);
        assert!(to.starts_with(&op.issuer) && to.contains("code_challenge_method=S256"), "{to}");
        let cb = login(&op, &redirect, &["--authorize-url", &to, &op.issuer, user, &format!("{user}-pw")]);
        let back = format!("{redirect}?code={}&state={}", cb["code"].as_str().unwrap(), cb["state"].as_str().unwrap());
        let (s, to, cookie) = no_follow(&back);
        assert_eq!((s, to.as_str()), (303, "/"), "signed in and sent to the page");
        cookie.expect("a session cookie")
    };
    let alice = sign_in("alice");
    let (s, body) = with_cookie("GET", &format!("{b}/web/session"), &b, &alice, None);
    let me: Value = serde_json::from_str(&body).unwrap();
    assert_eq!((s, me["name"].as_str(), me["groups"].clone(), me["role"].as_str()), (200, Some("alice"), serde_json::json!(["hr"]), Some("reader")), "{me}");
    let (_, body) = with_cookie("POST", &format!("{b}/v1/tenants/default/search"), &b, &alice, Some(&serde_json::json!({ "query": HR_QUESTION, "k": 3 })));
    assert!(body.contains("salary-bands.md"), "{body}");
    let (_, body) = with_cookie("POST", &format!("{b}/v1/tenants/default/search"), &b, &alice, Some(&serde_json::json!({ "query": LEGAL_QUESTION, "explain": true })));
    no_legal("an OIDC person's search", &body);

    // A replayed callback (its state used up) does not sign anyone in.
    let (s, to, _) = no_follow(&format!("{b}/auth/oidc/start"));
    assert_eq!(s, 303);
    let cb = login(&op, &redirect, &["--authorize-url", &to, &op.issuer, "dave", "dave-pw"]);
    let back = format!("{redirect}?code={}&state={}", cb["code"].as_str().unwrap(), cb["state"].as_str().unwrap());
    let (_, first, cookie) = no_follow(&back);
    assert_eq!(first, "/");
    assert!(cookie.is_some());
    let (_, second, cookie) = no_follow(&back);
    assert_eq!((second.as_str(), cookie), ("/?signin=failed", None));
    // carol has no group that [[sso.groups]] grants: refused, in words on the page.
    let (s, to, _) = no_follow(&format!("{b}/auth/oidc/start"));
    assert_eq!(s, 303);
    let cb = login(&op, &redirect, &["--authorize-url", &to, &op.issuer, "carol", "carol-pw"]);
    let (_, to, cookie) = no_follow(&format!("{redirect}?code={}&state={}", cb["code"].as_str().unwrap(), cb["state"].as_str().unwrap()));
    assert_eq!((to.as_str(), cookie), ("/?signin=no-group", None));

    // Scripts: the provider's ID token as the bearer; a tampered one is refused.
    let tokens = login(&op, &redirect, &[&op.issuer, "bob", "bob-pw"]);
    let token = tokens["id_token"].as_str().unwrap();
    let (s, j) = crate::server::post(&format!("{b}/v1/tenants/default/search"), Some(token), &serde_json::json!({ "query": LEGAL_QUESTION, "k": 3 }));
    assert_eq!(s, 200, "{j}");
    assert!(j["retrieval"]["hits"][0].to_string().contains("zephyr-matter.md"), "bob is in legal: {j}");
    let (s, _) = crate::server::post(&format!("{b}/v1/tenants/default/search"), Some(&format!("{token}x")), &serde_json::json!({ "query": "travel" }));
    assert_eq!(s, 401);

    // The audit names the person by subject and issuer, and what granted them; no token in it.
    let rows = audit_of(&data, &config, "alice");
    let who = &rows.iter().find(|r| r["action"] == "search").expect("alice's searches are audited")["detail"]["who"];
    assert_eq!((who["issuer"].as_str(), who["groups"].clone()), (Some(op.issuer.as_str()), serde_json::json!(["hr"])), "{who}");
    assert!(who["subject"].as_str().is_some_and(|s| !s.is_empty()));
    let (code, out, _) = crate::common::run(crate::common::ragbox(&data).arg("--config").arg(&config).args(["audit", "--json"]));
    assert_eq!(code, 0);
    assert!(!out.contains(token) && !out.contains(&cb["code"].as_str().unwrap()[..16]), "no token or code in the audit");
    assert!(!server.stderr().contains(token), "no token in the server's log");

    // Sign-out ends the session.
    let (s, _) = with_cookie("DELETE", &format!("{b}/web/session"), &b, &alice, None);
    assert_eq!(s, 204);
    let (s, _) = with_cookie("GET", &format!("{b}/web/session"), &b, &alice, None);
    assert_eq!(s, 401);
}

/// What the provider's login page shows now, once it has settled (no request in flight and the
/// page unchanged for 300 ms): `login`, `grant`, `continue`, `error: …`, or `home` (back on
/// ragbox's page).
async fn provider_page(c: &fantoccini::Client, base: &str) -> String {
    let probe = r#"
        const busy = window.jQuery ? jQuery.active > 0 : false;
        const shown = (css, text) => [...document.querySelectorAll(css)].find(e => e.offsetParent !== null && (!text || e.textContent.trim() === text));
        const toast = [...document.querySelectorAll('.toast-body')].map(e => e.textContent.trim()).filter(t => t).join(' / ');
        const state = location.href.startsWith(arguments[0]) ? 'home'
            : toast ? 'error: ' + toast
            : shown('button.btn-primary', 'Grant access') ? 'grant'
            : shown('#username') && shown('#password') && shown('#loginbut') ? 'login'
            : shown('button.btn-success', 'Continue') ? 'continue' : 'loading';
        return [busy, state, location.href, document.body ? document.body.innerText.length : 0].join('|');
    "#;
    let (mut last, mut since) = (String::new(), std::time::Instant::now());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let now = c.execute(probe, vec![base.into()]).await.unwrap().as_str().unwrap_or_default().to_string();
        if now != last {
            (last, since) = (now.clone(), std::time::Instant::now());
        } else if now.starts_with("false|") && !now.starts_with("false|loading") && since.elapsed().as_millis() >= 300 {
            return now.split('|').nth(1).unwrap().to_string();
        }
        assert!(std::time::Instant::now() < deadline, "the provider's page did not settle: {now}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Sign-in to a first answer through the page, in Chromium: ragbox's "Sign in with your
/// organisation", the provider's own login and consent pages, back to ragbox signed in as alice
/// (hr), a question answered from the HR folder, and a question about the legal matter answered
/// without it. Screenshots in `<target>/web-screenshots/sso-*.png`.
#[test]
fn sign_in_to_first_answer_in_a_real_browser() {
    use crate::web::{browser, driver, find, shot, text, until};
    let (server, _op, _data, _config) = oidc_server();
    let b = server.base.clone();
    let driver = driver();
    let profile = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let c = browser(&driver, profile.path()).await;
        c.goto(&format!("{b}/")).await.unwrap();
        until(&c, 15, "the organisation's sign-in button", "return !document.querySelector('#sso-oidc').hidden").await;
        shot(&c, "sso-signin").await;
        find(&c, "#oidc-link").await.click().await.unwrap();
        let mut steps = Vec::new();
        loop {
            let page = provider_page(&c, &b).await;
            steps.push(page.clone());
            assert!(steps.len() < 12, "the provider's pages went round: {steps:?}");
            match page.as_str() {
                "home" => break,
                "login" => {
                    shot(&c, "sso-provider-login").await;
                    find(&c, "#username").await.send_keys("alice").await.unwrap();
                    find(&c, "#password").await.send_keys("alice-pw").await.unwrap();
                    find(&c, "#loginbut").await.click().await.unwrap();
                }
                "grant" => {
                    shot(&c, "sso-provider-consent").await;
                    c.execute(
                        "document.querySelectorAll('input.form-check-input[id^=\"grant-\"]').forEach(b => { if (!b.checked) b.click(); }); \
                         [...document.querySelectorAll('button.btn-primary')].find(b => b.textContent.trim() === 'Grant access').click();",
                        vec![],
                    )
                    .await
                    .unwrap();
                }
                "continue" => {
                    c.execute("[...document.querySelectorAll('button.btn-success')].find(b => b.textContent.trim() === 'Continue').click()", vec![])
                        .await
                        .unwrap();
                }
                other => panic!("the provider's page says {other} (after {steps:?})"),
            }
        }
        assert!(steps.contains(&"login".to_string()), "{steps:?}");
        until(&c, 20, "signed in", "return !document.querySelector('#who').hidden").await;
        let who = text(&c, "#who-name").await;
        assert!(who.contains("alice") && who.contains("hr"), "{who}");

        find(&c, "#question").await.send_keys(HR_QUESTION).await.unwrap();
        find(&c, "#ask-button").await.click().await.unwrap();
        until(&c, 300, "the answer", "return !!document.querySelector('#answer .answer, #answer .error-box')").await;
        let answer = text(&c, "#answer").await;
        assert!(answer.contains("71,400") && answer.contains("84,900"), "{answer}");
        assert!(text(&c, "#sources").await.contains("salary-bands.md"));
        shot(&c, "sso-first-answer").await;

        find(&c, "#question").await.clear().await.unwrap();
        find(&c, "#question").await.send_keys(LEGAL_QUESTION).await.unwrap();
        // The first answer's box goes, so that the wait below sees the second one.
        c.execute("document.querySelector('#answer').replaceChildren()", vec![]).await.unwrap();
        find(&c, "#ask-button").await.click().await.unwrap();
        until(&c, 300, "the second answer", "return !!document.querySelector('#answer .answer, #answer .error-box')").await;
        let page = c.execute("return document.body.innerText", vec![]).await.unwrap();
        no_legal("the page", page.as_str().unwrap());
        shot(&c, "sso-legal-withheld").await;
        c.close().await.unwrap();
    });
}
