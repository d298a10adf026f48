//! Bearer keys: the [`Authed`] extractor turns `Authorization: Bearer rbx_…` (or, for the web
//! page, its session cookie: [`super::session`]) into a [`Caller`], or answers 401 (and writes an
//! `auth_failed` audit row). Failed attempts are
//! counted per client address; past the limit the address gets 429 for the rest of the minute,
//! before its key is even looked at.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};

use ragbox::service::Caller;

use super::{session, ApiError, State};

/// Failures per address in the current minute.
pub struct FailureLimiter {
    per_minute: u32,
    seen: Mutex<HashMap<IpAddr, (Instant, u32)>>,
}

const WINDOW: Duration = Duration::from_secs(60);

impl FailureLimiter {
    /// At most `per_minute` failures per address per minute.
    pub fn new(per_minute: u32) -> FailureLimiter {
        FailureLimiter { per_minute, seen: Mutex::default() }
    }

    /// Seconds until `ip` may try again, when it is over the limit.
    fn blocked(&self, ip: IpAddr) -> Option<u64> {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        match seen.get(&ip) {
            Some((start, n)) if *n >= self.per_minute && start.elapsed() < WINDOW => {
                Some((WINDOW - start.elapsed()).as_secs().max(1))
            }
            _ => None,
        }
    }

    /// Counts a failure; returns the count in this window.
    fn fail(&self, ip: IpAddr) -> u32 {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.len() > 10_000 {
            seen.retain(|_, (start, _)| start.elapsed() < WINDOW);
        }
        let entry = seen.entry(ip).or_insert((Instant::now(), 0));
        if entry.0.elapsed() >= WINDOW {
            *entry = (Instant::now(), 0);
        }
        entry.1 += 1;
        entry.1
    }
}

/// An authenticated caller.
pub struct Authed(pub Caller);

fn tenant_in_path(path: &str) -> &str {
    path.strip_prefix("/v1/tenants/").and_then(|rest| rest.split('/').next()).unwrap_or("")
}

/// The client's address (`0.0.0.0:0` when the server runs without connection info, in tests).
pub fn client_address(parts: &Parts) -> SocketAddr {
    parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|c| c.0).unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)))
}

/// 429 when `address` failed too often this minute.
pub fn check_not_blocked(state: &State, address: SocketAddr) -> Result<(), ApiError> {
    match state.auth_failures.blocked(address.ip()) {
        Some(secs) => {
            state.metrics.auth_failure("rate_limited");
            Err(ApiError {
                retry_after: Some(secs),
                ..ApiError::new(StatusCode::TOO_MANY_REQUESTS, "too_many_failures", "too many failed authentications from this address; wait a minute")
            })
        }
        None => Ok(()),
    }
}

/// Counts a failed attempt from `address` (towards its 429) and writes its audit row.
pub async fn count_failure(state: &State, address: SocketAddr, tenant: &str, reason: &'static str) {
    let count = state.auth_failures.fail(address.ip());
    state.metrics.auth_failure(reason);
    record(state, address, tenant, reason, count).await;
}

/// Counts a failed attempt ([`count_failure`]) and returns the 401.
pub async fn refuse(state: &State, address: SocketAddr, tenant: &str, reason: &'static str, message: &str) -> ApiError {
    count_failure(state, address, tenant, reason).await;
    ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
}

/// The caller a presented key stands for, or the 401 (counted and audited).
pub async fn caller_for_key(state: &State, address: SocketAddr, tenant: &str, secret: String) -> Result<Caller, ApiError> {
    let service = state.service.clone();
    let found = tokio::task::spawn_blocking(move || service.authenticate(&secret))
        .await
        .map_err(|e| ApiError::internal(format!("authentication worker failed: {e}")))??;
    match found {
        Some(key) => Ok(Caller::from_key(&key, Some(address.to_string()))),
        None => Err(refuse(state, address, tenant, "invalid", "the key is not valid (unknown or revoked)").await),
    }
}

impl FromRequestParts<State> for Authed {
    type Rejection = ApiError;

    /// A bearer key, or else the web page's session cookie (whose state-changing requests must
    /// come from the page's own origin).
    async fn from_request_parts(parts: &mut Parts, state: &State) -> Result<Authed, ApiError> {
        let address = client_address(parts);
        check_not_blocked(state, address)?;
        let presented = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
            .map(|k| k.trim().to_string())
            .filter(|k| !k.is_empty());
        let tenant = tenant_in_path(parts.uri.path()).to_string();
        if let Some(secret) = presented {
            return caller_for_key(state, address, &tenant, secret).await.map(Authed);
        }
        let Some(token) = session::session_cookie(&parts.headers) else {
            return Err(refuse(state, address, &tenant, "missing", "send `Authorization: Bearer <key>`; `ragbox keys create` makes keys").await);
        };
        session::check_origin(&parts.method, &parts.headers)?;
        match state.web.login(&token) {
            Some(session::Login::Key(secret)) => caller_for_key(state, address, &tenant, secret).await.map(Authed),
            Some(session::Login::Local) => Ok(Authed(session::local_caller(address))),
            None => Err(refuse(state, address, &tenant, "session_expired", "your sign-in has expired; sign in again").await),
        }
    }
}

/// Writes the audit row of a failed attempt (the first `per_minute` of each window; beyond,
/// the address is refused before it gets here).
async fn record(state: &State, address: SocketAddr, tenant: &str, reason: &'static str, count: u32) {
    if count > state.config.auth_failures_per_minute.max(1) {
        return;
    }
    let service = state.service.clone();
    let (addr, tenant) = (address.to_string(), tenant.to_string());
    let written = tokio::task::spawn_blocking(move || service.record_failed_auth(&addr, &tenant, reason)).await;
    if let Ok(Err(e)) | Err(e) = written.map_err(|e| ragbox::Error::Bug(e.to_string())) {
        tracing::error!("cannot write the audit row of a failed authentication: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_limited_per_address() {
        let l = FailureLimiter::new(3);
        let (a, b): (IpAddr, IpAddr) = ("127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap());
        for _ in 0..3 {
            assert!(l.blocked(a).is_none());
            l.fail(a);
        }
        assert!(l.blocked(a).is_some());
        assert!(l.blocked(b).is_none(), "another address is not affected");
        assert_eq!(tenant_in_path("/v1/tenants/acme/search"), "acme");
        assert_eq!(tenant_in_path("/v1/models"), "");
    }
}
