//! Sign-in with an OpenID Connect provider: the authorization-code flow with PKCE (S256), and
//! JWT bearer tokens for the API.
//!
//! 1. [`Provider::discover`] reads `{issuer}/.well-known/openid-configuration` and the provider's
//!    keys (JWKS). Only hosts in `sso.oidc.allow_hosts` are contacted: the issuer, the token
//!    endpoint and the JWKS must all be there. Redirects are never followed and no proxy from the
//!    environment is used.
//! 2. [`Provider::begin`] makes the URL the browser is sent to, with a fresh `state`, `nonce` and
//!    PKCE verifier kept by the caller in a [`Pending`] until the provider redirects back.
//! 3. [`Provider::finish`] exchanges the callback's `code` (with the verifier and, for a
//!    confidential client, the secret) at the token endpoint and verifies the ID token: signed
//!    with one of the provider's keys (by `kid`; an unknown `kid` refetches the JWKS once) using
//!    RS256, ES256 or PS256 only (never `none` nor a shared-secret HS*), `iss` the issuer, `aud`
//!    the client id, not expired, and the `nonce` the one [`Provider::begin`] made. The claims
//!    become an [`Identity`]: `sub`, `iss`, the `name_claim` (or `sub`), the `groups_claim`.
//! 4. [`Provider::verify_bearer`] checks a JWT an API client sends (an ID token or a JWT access
//!    token) the same way, but without a nonce and with `aud` the configured `audience` or the
//!    client id. Glewlwyd (the test provider, scripts/sso/oidc-launch.sh), for instance, puts the
//!    granted scopes in its access tokens' `aud` (`"openid profile email"`): set `audience` to
//!    that string to accept them.
//!
//! Errors ([`OidcError`]) say what to do next and never quote a token, a code or a secret.

use std::fmt;
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use ragbox_service::allowlist::HostAllowlist;
use ragbox_service::config::OidcSection;
use serde::Deserialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::Identity;

/// The only signature algorithms accepted: asymmetric, so the provider's public keys cannot be
/// used as a shared secret, and never `none`.
const ALGORITHMS: [Algorithm; 3] = [Algorithm::RS256, Algorithm::ES256, Algorithm::PS256];
/// Clock skew tolerated on `exp` and `nbf`, in seconds.
const LEEWAY_S: u64 = 60;
/// How long a sign-in may take between [`Provider::begin`] and [`Provider::finish`].
const PENDING_TTL: Duration = Duration::from_secs(600);
/// The JWKS is refetched for an unknown `kid` at most this often.
const JWKS_REFETCH_EVERY: Duration = Duration::from_secs(30);
/// The largest discovery document, JWKS or token response read.
const MAX_BODY: usize = 1 << 20;

/// Why a sign-in or a bearer token failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OidcError {
    /// The provider did not answer, or answered with an HTTP error.
    Unreachable(String),
    /// The settings or the provider's answers do not fit together.
    Misconfigured(String),
    /// The token or the code is not valid (forged, expired, meant for someone else, replayed).
    Rejected(String),
    /// The named host is not in `sso.oidc.allow_hosts`.
    NotAllowed(String),
}

impl fmt::Display for OidcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OidcError::Unreachable(d) => write!(f, "the OpenID Connect provider could not be reached: {d}; check that it is up and that sso.oidc.issuer is right, then try again"),
            OidcError::Misconfigured(d) => write!(f, "OpenID Connect sign-in is misconfigured: {d}; fix [sso.oidc] (docs/ACCESS.md, \"OpenID Connect\")"),
            OidcError::Rejected(d) => write!(f, "the sign-in was refused: {d}; sign in again"),
            OidcError::NotAllowed(h) => write!(f, "host `{h}` is not in sso.oidc.allow_hosts; add it there if ragbox may contact it"),
        }
    }
}

impl std::error::Error for OidcError {}

/// A sign-in under way: what [`Provider::begin`] made, kept (server-side) until the callback.
#[derive(Clone, PartialEq, Eq)]
pub struct Pending {
    /// Sent to the provider and expected back on the callback: compare it before [`Provider::finish`].
    pub state: String,
    /// Expected in the ID token.
    pub nonce: String,
    /// The PKCE code verifier; the authorize URL carries its S256 challenge.
    pub verifier: String,
    /// When the sign-in began; [`Provider::finish`] refuses one older than ten minutes.
    pub created: SystemTime,
}

impl fmt::Debug for Pending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pending")
            .field("state", &self.state)
            .field("created", &self.created)
            .finish_non_exhaustive()
    }
}

/// The discovery document's fields used here.
#[derive(Debug, Clone, Deserialize)]
struct Discovery {
    issuer: String,
    authorization_endpoint: String,
    token_endpoint: String,
    jwks_uri: String,
    #[serde(default)]
    token_endpoint_auth_methods_supported: Vec<String>,
}

/// An OpenID Connect provider, discovered; shared by every sign-in (it is `Send + Sync`).
pub struct Provider {
    settings: OidcSection,
    secret: Option<String>,
    allow: HostAllowlist,
    http: reqwest::Client,
    meta: Discovery,
    keys: RwLock<Vec<Jwk>>,
    refetched: Mutex<Option<Instant>>,
}

impl fmt::Debug for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Provider")
            .field("issuer", &self.meta.issuer)
            .field("client_id", &self.settings.client_id)
            .finish_non_exhaustive()
    }
}

impl Provider {
    /// Reads the provider's discovery document and keys; every host involved must be allowed.
    pub async fn discover(settings: &OidcSection) -> Result<Provider, OidcError> {
        let allow = HostAllowlist::parse(&settings.allow_hosts)
            .map_err(|e| OidcError::Misconfigured(format!("sso.oidc.allow_hosts: {e}")))?;
        let secret = match &settings.client_secret_file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    OidcError::Misconfigured(format!(
                        "sso.oidc.client_secret_file {} cannot be read ({e})",
                        path.display()
                    ))
                })?;
                let text = text.trim().to_string();
                if text.is_empty() {
                    return Err(OidcError::Misconfigured(format!(
                        "sso.oidc.client_secret_file {} is empty",
                        path.display()
                    )));
                }
                Some(text)
            }
            None => None,
        };
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .timeout(Duration::from_millis(settings.timeout_ms.max(1)))
            .build()
            .map_err(|e| {
                OidcError::Misconfigured(format!("the HTTP client cannot be built ({e})"))
            })?;
        let url = format!(
            "{}/.well-known/openid-configuration",
            settings.issuer.trim_end_matches('/')
        );
        let meta: Discovery = get_json(&http, &allow, &url, "the discovery document").await?;
        if meta.issuer.trim_end_matches('/') != settings.issuer.trim_end_matches('/') {
            return Err(OidcError::Misconfigured(format!(
                "the discovery document names issuer `{}`, not `{}`; set sso.oidc.issuer to the provider's own",
                meta.issuer, settings.issuer
            )));
        }
        let authorize = url::Url::parse(&meta.authorization_endpoint).ok();
        if !authorize.is_some_and(|u| matches!(u.scheme(), "http" | "https")) {
            return Err(OidcError::Misconfigured(
                "the discovery document's authorization_endpoint is not an http(s) URL".into(),
            ));
        }
        allowed(&allow, &meta.token_endpoint)?;
        let keys = fetch_keys(&http, &allow, &meta.jwks_uri).await?;
        Ok(Provider {
            settings: settings.clone(),
            secret,
            allow,
            http,
            meta,
            keys: RwLock::new(keys),
            refetched: Mutex::new(None),
        })
    }

    /// The issuer, as the discovery document names it (the `iss` of its tokens).
    pub fn issuer(&self) -> &str {
        &self.meta.issuer
    }

    /// The URL to send the browser to, and what to keep until it comes back.
    ///
    /// # Panics
    /// When the operating system cannot supply random bytes.
    pub fn begin(&self) -> (String, Pending) {
        let pending = Pending {
            state: random_token(),
            nonce: random_token(),
            verifier: random_token(),
            created: SystemTime::now(),
        };
        let mut scopes = vec!["openid".to_string()];
        scopes.extend(
            self.settings
                .scopes
                .iter()
                .filter(|s| *s != "openid")
                .cloned(),
        );
        let mut url =
            url::Url::parse(&self.meta.authorization_endpoint).expect("checked by discover");
        url.query_pairs_mut()
            .append_pair("response_type", "code")
            .append_pair("client_id", &self.settings.client_id)
            .append_pair("redirect_uri", &self.settings.redirect_url)
            .append_pair("scope", &scopes.join(" "))
            .append_pair("state", &pending.state)
            .append_pair("nonce", &pending.nonce)
            .append_pair("code_challenge", &pkce_challenge(&pending.verifier))
            .append_pair("code_challenge_method", "S256");
        (url.into(), pending)
    }

    /// Exchanges the callback's `code` and verifies the ID token that comes back. The caller
    /// has already matched the callback's `state` with `pending.state`.
    pub async fn finish(&self, pending: &Pending, code: &str) -> Result<Identity, OidcError> {
        if pending
            .created
            .elapsed()
            .map_or(true, |age| age > PENDING_TTL)
        {
            return Err(OidcError::Rejected(
                "the sign-in took longer than ten minutes".into(),
            ));
        }
        let mut form = vec![
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", self.settings.redirect_url.as_str()),
            ("code_verifier", pending.verifier.as_str()),
            ("client_id", self.settings.client_id.as_str()),
        ];
        let mut request = self.http.post(&self.meta.token_endpoint);
        if let Some(secret) = &self.secret {
            let methods = &self.meta.token_endpoint_auth_methods_supported;
            if methods.iter().any(|m| m == "client_secret_post")
                && !methods.iter().any(|m| m == "client_secret_basic")
            {
                form.push(("client_secret", secret));
            } else {
                let enc = |s: &str| {
                    url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>()
                };
                let pair = format!("{}:{}", enc(&self.settings.client_id), enc(secret));
                request = request.header(
                    reqwest::header::AUTHORIZATION,
                    format!(
                        "Basic {}",
                        base64::engine::general_purpose::STANDARD.encode(pair)
                    ),
                );
            }
        }
        allowed(&self.allow, &self.meta.token_endpoint)?;
        let response = request
            .form(&form)
            .send()
            .await
            .map_err(|e| transport("the token endpoint", e))?;
        let status = response.status();
        let body = read_body(response, "the token endpoint").await?;
        if !status.is_success() {
            let error = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|v| v.get("error").and_then(Value::as_str).map(str::to_string));
            let error = error.filter(|e| {
                e.len() <= 64 && e.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            });
            return Err(match (status.as_u16(), error.as_deref()) {
                (_, Some("invalid_client" | "unauthorized_client")) | (401, _) => OidcError::Misconfigured(format!(
                    "the provider refused the client ({}); check sso.oidc.client_id, client_secret_file and that the provider lets this client use the authorization code grant",
                    error.as_deref().unwrap_or("HTTP 401")
                )),
                (400..=499, e) => OidcError::Rejected(format!("the provider refused the code ({})", e.unwrap_or("HTTP error"))),
                (s, _) => OidcError::Unreachable(format!("the token endpoint answered HTTP {s}")),
            });
        }
        let tokens: Value = serde_json::from_slice(&body).map_err(|_| {
            OidcError::Unreachable("the token endpoint's answer is not JSON".into())
        })?;
        let id_token = tokens.get("id_token").and_then(Value::as_str).ok_or_else(|| {
            OidcError::Misconfigured("the token endpoint sent no ID token; the client must be allowed the `openid` scope".into())
        })?;
        let client_id = self.settings.client_id.as_str();
        self.verify(id_token, &[client_id], Some(&pending.nonce))
            .await
    }

    /// Verifies a JWT bearer token (an ID token or a JWT access token): signature, issuer,
    /// expiry, and `aud` containing `sso.oidc.audience` or the client id.
    pub async fn verify_bearer(&self, token: &str) -> Result<Identity, OidcError> {
        let client_id = self.settings.client_id.as_str();
        match self.settings.audience.as_deref() {
            Some(aud) if aud != client_id => self.verify(token, &[aud, client_id], None).await,
            _ => self.verify(token, &[client_id], None).await,
        }
    }

    async fn verify(
        &self,
        token: &str,
        audience: &[&str],
        nonce: Option<&str>,
    ) -> Result<Identity, OidcError> {
        let header = jsonwebtoken::decode_header(token)
            .map_err(|_| OidcError::Rejected("the token is not a signed JWT".into()))?;
        if !ALGORITHMS.contains(&header.alg) {
            return Err(OidcError::Rejected(format!(
                "the token is signed with {:?}; only RS256, ES256 and PS256 are accepted",
                header.alg
            )));
        }
        let key = match self.key_for(header.kid.as_deref(), header.alg) {
            Some(key) => key,
            None => {
                self.refetch_keys().await?;
                self.key_for(header.kid.as_deref(), header.alg)
                    .ok_or_else(|| {
                        OidcError::Rejected(
                            "the token is signed with a key the provider does not publish".into(),
                        )
                    })?
            }
        };
        let mut validation = Validation::new(header.alg);
        validation.algorithms = vec![header.alg];
        validation.leeway = LEEWAY_S;
        validation.validate_nbf = true;
        validation.set_issuer(&[self.meta.issuer.as_str()]);
        validation.set_audience(audience);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let claims = jsonwebtoken::decode::<Map<String, Value>>(token, &key, &validation)
            .map_err(|e| OidcError::Rejected(jwt_problem(&e)))?
            .claims;
        if let Some(nonce) = nonce {
            if claims.get("nonce").and_then(Value::as_str) != Some(nonce) {
                return Err(OidcError::Rejected(
                    "the ID token's nonce is not this sign-in's".into(),
                ));
            }
        }
        identity(&claims, &self.settings, SystemTime::now())
    }

    /// The published key for `kid` (or the only one usable with `alg` when the token names none).
    fn key_for(&self, kid: Option<&str>, alg: Algorithm) -> Option<DecodingKey> {
        let keys = self.keys.read().unwrap_or_else(|p| p.into_inner());
        let fits = |k: &&Jwk| {
            k.common
                .key_algorithm
                .is_none_or(|a| format!("{a:?}") == format!("{alg:?}"))
        };
        let chosen = match kid {
            Some(kid) => keys
                .iter()
                .filter(fits)
                .find(|k| k.common.key_id.as_deref() == Some(kid)),
            None => {
                let mut usable = keys.iter().filter(fits);
                usable.next().filter(|_| usable.next().is_none())
            }
        };
        chosen.and_then(|k| DecodingKey::from_jwk(k).ok())
    }

    /// Fetches the JWKS again (a key rotation), at most once per [`JWKS_REFETCH_EVERY`].
    async fn refetch_keys(&self) -> Result<(), OidcError> {
        {
            let mut last = self.refetched.lock().unwrap_or_else(|p| p.into_inner());
            if last.is_some_and(|t| t.elapsed() < JWKS_REFETCH_EVERY) {
                return Ok(());
            }
            *last = Some(Instant::now());
        }
        let keys = fetch_keys(&self.http, &self.allow, &self.meta.jwks_uri).await?;
        *self.keys.write().unwrap_or_else(|p| p.into_inner()) = keys;
        Ok(())
    }
}

/// The host of `url`, if the allowlist allows it.
fn allowed(allow: &HostAllowlist, url: &str) -> Result<(), OidcError> {
    let host = url::Url::parse(url)
        .map_err(|_| OidcError::Misconfigured(format!("`{url}` is not a URL")))?
        .host_str()
        .map(str::to_string)
        .ok_or_else(|| OidcError::Misconfigured(format!("`{url}` names no host")))?;
    if allow.allows(&host) {
        Ok(())
    } else {
        Err(OidcError::NotAllowed(host))
    }
}

async fn get_json<T: serde::de::DeserializeOwned>(
    http: &reqwest::Client,
    allow: &HostAllowlist,
    url: &str,
    what: &str,
) -> Result<T, OidcError> {
    allowed(allow, url)?;
    let response = http
        .get(url)
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(|e| transport(what, e))?;
    let status = response.status();
    if !status.is_success() {
        let hint = if status.is_redirection() {
            " (a redirect, which is not followed)"
        } else {
            ""
        };
        return Err(OidcError::Unreachable(format!(
            "{what} at {url} answered HTTP {}{hint}",
            status.as_u16()
        )));
    }
    let body = read_body(response, what).await?;
    serde_json::from_slice(&body).map_err(|e| {
        OidcError::Misconfigured(format!(
            "{what} at {url} is not what OpenID Connect expects ({e})"
        ))
    })
}

/// The response's body, refused past [`MAX_BODY`].
async fn read_body(mut response: reqwest::Response, what: &str) -> Result<Vec<u8>, OidcError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| transport(what, e))? {
        if body.len() + chunk.len() > MAX_BODY {
            return Err(OidcError::Unreachable(format!(
                "{what} sent more than {MAX_BODY} bytes"
            )));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The provider's signing keys; keys of unknown types or meant for encryption are skipped.
async fn fetch_keys(
    http: &reqwest::Client,
    allow: &HostAllowlist,
    url: &str,
) -> Result<Vec<Jwk>, OidcError> {
    #[derive(Deserialize)]
    struct Set {
        keys: Vec<Value>,
    }
    let set: Set = get_json(http, allow, url, "the provider's keys (jwks_uri)").await?;
    let keys: Vec<Jwk> = set
        .keys
        .into_iter()
        .filter(|k| {
            k.get("use")
                .and_then(Value::as_str)
                .is_none_or(|u| u == "sig")
        })
        .filter_map(|k| serde_json::from_value(k).ok())
        .collect();
    if keys.is_empty() {
        return Err(OidcError::Misconfigured(format!(
            "the provider publishes no signing key usable here at {url} (RS256, ES256 or PS256)"
        )));
    }
    Ok(keys)
}

/// A transport failure, in words without the URL.
fn transport(what: &str, e: reqwest::Error) -> OidcError {
    if e.is_timeout() {
        return OidcError::Unreachable(format!("{what} timed out (sso.oidc.timeout_ms)"));
    }
    let e = e.without_url();
    let mut why = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        why.push_str(": ");
        why.push_str(&s.to_string());
        source = s.source();
    }
    OidcError::Unreachable(format!("{what}: {why}"))
}

/// What was wrong with a token, in words that quote none of it.
fn jwt_problem(e: &jsonwebtoken::errors::Error) -> String {
    use jsonwebtoken::errors::ErrorKind as K;
    match e.kind() {
        K::InvalidSignature => "the token's signature does not match the provider's key".into(),
        K::ExpiredSignature => "the token has expired".into(),
        K::ImmatureSignature => "the token is not valid yet (check the clocks)".into(),
        K::InvalidIssuer => "the token was issued by another issuer".into(),
        K::InvalidAudience => "the token is meant for another audience (sso.oidc.audience)".into(),
        K::MissingRequiredClaim(c) => format!("the token has no `{c}` claim"),
        K::InvalidAlgorithm | K::InvalidAlgorithmName => {
            "the token's algorithm does not fit the provider's key".into()
        }
        _ => "the token is malformed".into(),
    }
}

/// The Identity the claims describe.
fn identity(
    claims: &Map<String, Value>,
    settings: &OidcSection,
    now: SystemTime,
) -> Result<Identity, OidcError> {
    let text = |name: &str| {
        claims
            .get(name)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let subject = text("sub")
        .ok_or_else(|| OidcError::Rejected("the token names no subject (`sub`)".into()))?;
    let issuer =
        text("iss").ok_or_else(|| OidcError::Rejected("the token names no issuer".into()))?;
    let exp = claims
        .get("exp")
        .and_then(Value::as_u64)
        .ok_or_else(|| OidcError::Rejected("the token has no expiry".into()))?;
    Ok(Identity {
        subject: subject.to_string(),
        issuer: issuer.to_string(),
        name: text(&settings.name_claim).unwrap_or(subject).to_string(),
        groups: groups(claims.get(&settings.groups_claim)),
        expires_at: expiry(exp, settings.session_hours, now),
    })
}

/// The groups claim: an array of strings or one string; anything else is no groups.
fn groups(claim: Option<&Value>) -> Vec<String> {
    let mut groups: Vec<String> = match claim {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    };
    groups.retain(|g| !g.is_empty());
    groups.sort();
    groups.dedup();
    groups
}

/// The sooner of the token's expiry and the end of the longest session.
fn expiry(exp: u64, session_hours: u64, now: SystemTime) -> SystemTime {
    let token = UNIX_EPOCH
        .checked_add(Duration::from_secs(exp))
        .unwrap_or(now);
    let session = now
        .checked_add(Duration::from_secs(session_hours.saturating_mul(3600)))
        .unwrap_or(token);
    token.min(session)
}

/// The S256 challenge of a PKCE verifier (RFC 7636, 4.2).
fn pkce_challenge(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// 32 random bytes, base64url: a state, a nonce or a PKCE verifier (43 characters).
fn random_token() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the operating system supplies random bytes");
    URL_SAFE_NO_PAD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> OidcSection {
        OidcSection {
            issuer: "http://127.0.0.1:9/api/oidc".into(),
            client_id: "ragbox".into(),
            client_secret_file: None,
            redirect_url: "http://127.0.0.1:7071/auth/oidc/callback".into(),
            scopes: vec!["profile".into(), "email".into()],
            groups_claim: "groups".into(),
            name_claim: "preferred_username".into(),
            audience: None,
            allow_hosts: vec!["127.0.0.1".into()],
            session_hours: 12,
            timeout_ms: 1000,
        }
    }

    /// A provider without a network: its discovery and keys given.
    fn offline(keys: Value) -> Provider {
        let s = settings();
        let meta = Discovery {
            issuer: s.issuer.clone(),
            authorization_endpoint: format!("{}/auth", s.issuer),
            token_endpoint: format!("{}/token", s.issuer),
            jwks_uri: format!("{}/jwks", s.issuer),
            token_endpoint_auth_methods_supported: vec![],
        };
        let keys = keys["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| serde_json::from_value(k.clone()).unwrap())
            .collect();
        Provider {
            allow: HostAllowlist::parse(&s.allow_hosts).unwrap(),
            settings: s,
            secret: None,
            http: reqwest::Client::new(),
            meta,
            keys: RwLock::new(keys),
            // A refetch would need the network: pretend one just happened.
            refetched: Mutex::new(Some(Instant::now())),
        }
    }

    fn b64(v: &Value) -> String {
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).unwrap())
    }

    fn claims() -> Value {
        let exp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + 600;
        serde_json::json!({"iss": "http://127.0.0.1:9/api/oidc", "aud": "ragbox", "sub": "alice", "exp": exp, "groups": ["hr"]})
    }

    #[test]
    fn pkce_challenge_matches_rfc7636_appendix_b() {
        assert_eq!(
            pkce_challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }

    #[test]
    fn groups_are_an_array_or_one_string_sorted_and_distinct() {
        use serde_json::json;
        assert_eq!(
            groups(Some(&json!(["legal", "hr", "legal", 7, "", null]))),
            ["hr", "legal"]
        );
        assert_eq!(groups(Some(&json!("hr"))), ["hr"]);
        assert!(groups(None).is_empty());
        assert!(groups(Some(&json!(42))).is_empty());
        assert!(groups(Some(&json!({"hr": true}))).is_empty());
        assert!(groups(Some(&json!(""))).is_empty());
    }

    #[test]
    fn identity_takes_name_claim_or_sub_and_the_sooner_expiry() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let mut c: Map<String, Value> = serde_json::from_value(serde_json::json!({"sub": "s1", "iss": "i", "exp": 1_000_000 + 3600, "preferred_username": "alice", "groups": "hr"})).unwrap();
        let mut s = settings();
        s.session_hours = 12;
        let id = identity(&c, &s, now).unwrap();
        assert_eq!(
            (id.subject.as_str(), id.issuer.as_str(), id.name.as_str()),
            ("s1", "i", "alice")
        );
        assert_eq!(id.groups, ["hr"]);
        assert_eq!(id.expires_at, now + Duration::from_secs(3600));
        s.session_hours = 0;
        assert_eq!(identity(&c, &s, now).unwrap().expires_at, now);
        c.remove("preferred_username");
        assert_eq!(identity(&c, &s, now).unwrap().name, "s1");
        c.remove("sub");
        assert!(matches!(identity(&c, &s, now), Err(OidcError::Rejected(_))));
    }

    #[tokio::test]
    async fn hs256_and_none_are_refused_even_with_the_public_key_as_secret() {
        // An RSA public key, as a provider would publish it; an attacker signs HS256 with its bytes.
        let n = URL_SAFE_NO_PAD.encode([0xc5u8; 256]);
        let jwks = serde_json::json!({"keys": [{"kty": "RSA", "kid": "k1", "alg": "RS256", "n": n, "e": "AQAB"}]});
        let p = offline(jwks);
        let body = b64(&claims());
        for alg in ["HS256", "HS512", "none", "None"] {
            let head = b64(&serde_json::json!({"alg": alg, "typ": "JWT", "kid": "k1"}));
            let signing = format!("{head}.{body}");
            let sig = URL_SAFE_NO_PAD.encode(Sha256::digest(format!("{n}{signing}").as_bytes()));
            for token in [format!("{signing}.{sig}"), format!("{signing}.")] {
                let e = p.verify_bearer(&token).await.unwrap_err();
                assert!(matches!(e, OidcError::Rejected(_)), "{alg}: {e}");
                assert!(
                    !e.to_string().contains(&body),
                    "the message quotes the token: {e}"
                );
            }
        }
        // Properly formed RS256 but signed with garbage: the signature check refuses it.
        let head = b64(&serde_json::json!({"alg": "RS256", "kid": "k1"}));
        let e = p
            .verify_bearer(&format!(
                "{head}.{body}.{}",
                URL_SAFE_NO_PAD.encode([1u8; 256])
            ))
            .await
            .unwrap_err();
        assert!(matches!(e, OidcError::Rejected(_)), "{e}");
        // An unknown kid: no key (a refetch was just made, so none is tried).
        let head = b64(&serde_json::json!({"alg": "RS256", "kid": "other"}));
        let e = p
            .verify_bearer(&format!("{head}.{body}.AAAA"))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("does not publish"), "{e}");
        assert!(matches!(
            p.verify_bearer("not a token").await,
            Err(OidcError::Rejected(_))
        ));
    }

    #[test]
    fn begin_makes_fresh_secrets_and_an_s256_challenge() {
        let p = offline(serde_json::json!({"keys": []}));
        let (url, a) = p.begin();
        let (_, b) = p.begin();
        assert!(a.state != b.state && a.nonce != b.nonce && a.verifier != b.verifier);
        assert_eq!(a.verifier.len(), 43);
        let url = url::Url::parse(&url).unwrap();
        let q: std::collections::HashMap<_, _> = url.query_pairs().into_owned().collect();
        assert_eq!(q["response_type"], "code");
        assert_eq!(q["client_id"], "ragbox");
        assert_eq!(q["scope"], "openid profile email");
        assert_eq!(q["state"], a.state);
        assert_eq!(q["nonce"], a.nonce);
        assert_eq!(q["code_challenge"], pkce_challenge(&a.verifier));
        assert_eq!(q["code_challenge_method"], "S256");
        assert_eq!(
            q["redirect_uri"],
            "http://127.0.0.1:7071/auth/oidc/callback"
        );
        assert!(!format!("{a:?}").contains(&a.verifier));
    }

    #[test]
    fn hosts_outside_the_allowlist_are_named() {
        let allow = HostAllowlist::parse(&["127.0.0.1".to_string()]).unwrap();
        assert_eq!(
            allowed(&allow, "http://10.0.0.1/jwks"),
            Err(OidcError::NotAllowed("10.0.0.1".into()))
        );
        assert!(allowed(&allow, "http://127.0.0.1:9/jwks").is_ok());
    }

    #[tokio::test]
    async fn an_old_pending_sign_in_is_refused_before_any_request() {
        let p = offline(serde_json::json!({"keys": []}));
        let (_, mut pending) = p.begin();
        pending.created = SystemTime::now() - Duration::from_secs(3600);
        assert!(matches!(
            p.finish(&pending, "code").await,
            Err(OidcError::Rejected(_))
        ));
    }
}
