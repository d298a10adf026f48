//! The web page: `/` and its assets (plain HTML, CSS and ES modules under `assets/`, embedded in
//! the binary at compile time: nothing is fetched from anywhere else, and the build needs no
//! JavaScript toolchain), and the browser's sign-in.
//!
//! The page speaks the same `/v1` API as any client. Instead of a bearer key it holds a session
//! cookie (`HttpOnly`, `SameSite=Strict`), made by signing in with a key (`POST /web/session`) or
//! by the one-time link `ragbox serve` prints at start (`GET /signin?token=…`, as Jupyter does),
//! which signs in as the local user who started the server (every tenant, admin). A request
//! authenticated by the cookie that changes something must carry an `Origin` equal to the
//! server's own ([`check_origin`](super::session::check_origin)). A key's session is checked against the catalog on every
//! request, so revoking the key ends it. Sessions live in memory and end after
//! [`SESSION_IDLE`](super::session::SESSION_IDLE) without a request, at sign-out, or when the server stops.
//!
//! People sign in with the organisation's identity when `[sso]` is configured: a user name and
//! password checked against the LDAP directory (`POST /web/session` with `user` and
//! `password`), or the OpenID Connect provider's own page (`GET /auth/oidc/start`, which sends
//! the browser there with PKCE, and `GET /auth/oidc/callback`, where it comes back). Their
//! session lasts until their sign-in expires (`session_hours`, or the ID token's expiry).
//! `GET /web/sso` tells the page which of them it offers.

use std::net::SocketAddr;

use axum::extract::{FromRequestParts, Path, Query, State as Extract};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;

use ragbox_service::KeyRole;

use super::api::ApiJson;
use super::auth::{self, Authed};
use super::session::{check_origin, cookie, session_cookie, Login, SESSION_IDLE};
use super::{ApiError, State};

/// Who the page is signed in as: `GET /web/session`.
pub async fn whoami(Extract(state): Extract<State>, Authed(caller): Authed) -> Result<Json<serde_json::Value>, ApiError> {
    let c = caller.clone();
    let tenants = state.blocking(move |s| s.tenants(&c)).await?;
    let mut names: Vec<String> = tenants.iter().map(|t| t.name.clone()).collect();
    // A key of a tenant that has no documents yet still works in it (an upload creates it); an
    // admin of an empty data folder starts with the default tenant.
    let own = caller.tenant.clone().or_else(|| names.is_empty().then(|| ragbox_service::DEFAULT_TENANT.to_string()));
    if let Some(own) = own.filter(|t| !names.contains(t)) {
        names.push(own);
    }
    Ok(Json(serde_json::json!({
        "name": caller.name,
        "role": caller.role,
        "local": caller.key_id.is_none() && caller.person.is_none(),
        "person": caller.person.is_some(),
        "groups": match &caller.audience { ragbox_service::Audience::Groups(g) => g.clone(), ragbox_service::Audience::Everyone => Vec::new() },
        "tenants": names,
        "can_write": caller.role >= KeyRole::Writer,
        "admin": caller.role == KeyRole::Admin,
    })))
}

/// `POST /web/session` with `{"key": "rbx_…"}`, or `{"user": …, "password": …}` for the
/// LDAP directory.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignIn {
    /// The API key.
    #[serde(default)]
    pub key: Option<String>,
    /// The person's user name in the directory.
    #[serde(default)]
    pub user: Option<String>,
    /// Their password.
    #[serde(default)]
    pub password: Option<String>,
}

/// Which sign-ins the page offers: `GET /web/sso` (no sign-in needed).
pub async fn sso_options(Extract(state): Extract<State>) -> Json<serde_json::Value> {
    Json(serde_json::json!({ "ldap": state.sso.ldap_configured(), "oidc": state.sso.oidc_configured() }))
}

/// Starts a session for a person the directory or the provider vouched for; `None` when none
/// of their groups is granted a tenant.
fn person_session(state: &State, identity: &super::sso::Identity, address: SocketAddr) -> Option<(String, u64)> {
    let caller = state.sso.caller(identity, Some(address.to_string()))?;
    let left = identity.expires_at.duration_since(std::time::SystemTime::now()).unwrap_or_default().as_secs();
    let token = state.web.start(Login::Person { caller: Box::new(caller), expires_at: identity.expires_at });
    Some((token, left.min(SESSION_IDLE.as_secs())))
}

/// Signs a person in with the LDAP directory.
async fn sign_in_person(state: &State, info: &RequestInfo, user: &str, password: &str) -> Result<Response, ApiError> {
    let identity = match state.sso.ldap_sign_in(user, password).await {
        Ok(identity) => identity,
        Err(message) => return Err(auth::refuse(state, info.address, "", "ldap", &message).await),
    };
    let Some((token, max_age)) = person_session(state, &identity, info.address) else {
        return Err(auth::refuse(state, info.address, "", "no_group", "none of your groups is granted a tenant here; ask an administrator").await);
    };
    let mut response = StatusCode::NO_CONTENT.into_response();
    response.headers_mut().insert(header::SET_COOKIE, cookie(&token, max_age));
    Ok(response)
}

/// `GET /auth/oidc/start`: sends the browser to the provider's sign-in page.
pub async fn oidc_start(Extract(state): Extract<State>, info: RequestInfo) -> Result<Response, ApiError> {
    auth::check_not_blocked(&state, info.address)?;
    let url = state.sso.oidc_begin().await.map_err(|m| ApiError::new(StatusCode::BAD_GATEWAY, "sso_unavailable", m))?;
    let mut r = StatusCode::SEE_OTHER.into_response();
    r.headers_mut().insert(header::LOCATION, HeaderValue::from_str(&url).map_err(|_| ApiError::internal("the provider's authorisation URL is not a header value"))?);
    Ok(r)
}

/// `GET /auth/oidc/callback?code=…&state=…`.
#[derive(Debug, Deserialize)]
pub struct Callback {
    #[serde(default)]
    code: String,
    #[serde(default)]
    state: String,
    #[serde(default)]
    error: Option<String>,
}

/// Where the provider sends the browser back: the code is exchanged, the ID token verified, the
/// session started, and the browser goes to the page (with a note when it did not work).
pub async fn oidc_callback(Extract(state): Extract<State>, info: RequestInfo, Query(q): Query<Callback>) -> Result<Response, ApiError> {
    auth::check_not_blocked(&state, info.address)?;
    let redirect = |to: &str| {
        let mut r = StatusCode::SEE_OTHER.into_response();
        r.headers_mut().insert(header::LOCATION, HeaderValue::from_str(to).expect("a fixed path"));
        r
    };
    if q.error.is_some() || q.code.is_empty() {
        auth::count_failure(&state, info.address, "", "oidc_refused").await;
        return Ok(redirect("/?signin=refused"));
    }
    let identity = match state.sso.oidc_finish(&q.state, &q.code).await {
        Ok(identity) => identity,
        Err(message) => {
            tracing::warn!("an OpenID Connect sign-in failed: {message}");
            auth::count_failure(&state, info.address, "", "oidc").await;
            return Ok(redirect("/?signin=failed"));
        }
    };
    let Some((token, max_age)) = person_session(&state, &identity, info.address) else {
        auth::count_failure(&state, info.address, "", "no_group").await;
        return Ok(redirect("/?signin=no-group"));
    };
    let mut response = redirect("/");
    response.headers_mut().insert(header::SET_COOKIE, cookie(&token, max_age));
    Ok(response)
}

/// Where the extractors need the request's parts.
pub struct RequestInfo {
    address: SocketAddr,
    method: Method,
    headers: HeaderMap,
}

impl FromRequestParts<State> for RequestInfo {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, _: &State) -> Result<Self, Self::Rejection> {
        Ok(RequestInfo { address: auth::client_address(parts), method: parts.method.clone(), headers: parts.headers.clone() })
    }
}

/// Signs in with a key: sets the session cookie.
pub async fn sign_in(Extract(state): Extract<State>, info: RequestInfo, ApiJson(body): ApiJson<SignIn>) -> Result<Response, ApiError> {
    check_origin(&info.method, &info.headers)?;
    auth::check_not_blocked(&state, info.address)?;
    if let (Some(user), Some(password)) = (&body.user, &body.password) {
        return sign_in_person(&state, &info, user.trim(), password).await;
    }
    let secret = body.key.as_deref().unwrap_or_default().trim().to_string();
    if secret.is_empty() {
        return Err(ApiError::invalid("paste a key (`ragbox keys create` makes one), or sign in with your user name and password"));
    }
    auth::caller_for_key(&state, info.address, "", secret.clone()).await?;
    let token = state.web.start(Login::Key(secret));
    let mut response = StatusCode::NO_CONTENT.into_response();
    response.headers_mut().insert(header::SET_COOKIE, cookie(&token, SESSION_IDLE.as_secs()));
    Ok(response)
}

/// Signs out: ends the session and clears the cookie.
pub async fn sign_out(Extract(state): Extract<State>, info: RequestInfo) -> Result<Response, ApiError> {
    check_origin(&info.method, &info.headers)?;
    if let Some(token) = session_cookie(&info.headers) {
        state.web.end(&token);
    }
    let mut response = StatusCode::NO_CONTENT.into_response();
    response.headers_mut().insert(header::SET_COOKIE, cookie("", 0));
    Ok(response)
}

/// `GET /signin?token=…`.
#[derive(Debug, Deserialize)]
pub struct LinkQuery {
    /// The start-up line's token.
    #[serde(default)]
    pub token: String,
}

/// The one-time start-up link: signs the browser in as the local user and goes to the page
/// (whose address then no longer holds the token). A used or wrong token goes to the page with
/// a note, and counts as a failed authentication.
pub async fn sign_in_link(Extract(state): Extract<State>, info: RequestInfo, Query(q): Query<LinkQuery>) -> Result<Response, ApiError> {
    auth::check_not_blocked(&state, info.address)?;
    let redirect = |to: &str| {
        let mut r = StatusCode::SEE_OTHER.into_response();
        r.headers_mut().insert(header::LOCATION, HeaderValue::from_str(to).expect("a fixed path"));
        r
    };
    if !state.web.redeem(&q.token) {
        auth::count_failure(&state, info.address, "", "signin_link").await;
        return Ok(redirect("/?signin=used"));
    }
    let token = state.web.start(Login::Local);
    let mut response = redirect("/");
    response.headers_mut().insert(header::SET_COOKIE, cookie(&token, SESSION_IDLE.as_secs()));
    Ok(response)
}

/// The page's files, embedded: (path under `/assets/`, content type, bytes).
const ASSETS: &[(&str, &str, &str)] = &[
    ("app.js", "text/javascript; charset=utf-8", include_str!("assets/app.js")),
    ("api.js", "text/javascript; charset=utf-8", include_str!("assets/api.js")),
    ("app.css", "text/css; charset=utf-8", include_str!("assets/app.css")),
    ("icon.svg", "image/svg+xml", include_str!("assets/icon.svg")),
];

const INDEX: &str = include_str!("assets/index.html");

/// Headers every page response carries: nothing may load from another origin, the page may not
/// be framed, and no address (a sign-in link) leaks in a Referer.
fn page_headers(response: &mut Response, content_type: &str) {
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_str(content_type).expect("a fixed content type"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; \
             font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
        ),
    );
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
}

/// `GET /`: the page.
pub async fn index() -> Response {
    let mut r = INDEX.into_response();
    page_headers(&mut r, "text/html; charset=utf-8");
    r
}

/// `GET /assets/{name}`.
pub async fn asset(Path(name): Path<String>) -> Response {
    match ASSETS.iter().find(|(n, _, _)| *n == name) {
        Some((_, content_type, body)) => {
            let mut r = (*body).into_response();
            page_headers(&mut r, content_type);
            r
        }
        None => ApiError::not_found("no such file").into_response(),
    }
}

/// Every embedded file, for the test that no asset names another origin.
#[cfg(test)]
pub fn embedded() -> impl Iterator<Item = (&'static str, &'static str)> {
    std::iter::once(("index.html", INDEX)).chain(ASSETS.iter().map(|(n, _, b)| (*n, *b)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_asset_names_another_origin() {
        for (name, body) in embedded() {
            // The SVG namespace is a name, not an address anything is fetched from.
            let body = body.replace(r#"xmlns="http://www.w3.org/2000/svg""#, "");
            for needle in ["http://", "https://", "//cdn", "@import url(", "src=\"//"] {
                assert!(!body.contains(needle), "{name} references another origin ({needle})");
            }
        }
    }
}
