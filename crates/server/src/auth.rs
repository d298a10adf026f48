//! Bearer keys: the [`Authed`] extractor turns `Authorization: Bearer rbx_…` (or, for the web
//! page, its session cookie: [`super::session`]) into a [`Caller`], or answers 401 (and writes an
//! `auth_failed` audit row). Failed attempts are
//! counted per client address; past the limit in any minute the address gets 429 until its
//! oldest counted failure is a minute old, before its key is even looked at.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};

use ragbox_service::Caller;

use super::{session, ApiError, State};

/// Failures per address in the last minute (a sliding window: the times of the last
/// `per_minute` failures, so no boundary lets twice the limit through).
pub struct FailureLimiter {
    per_minute: u32,
    seen: Mutex<HashMap<IpAddr, VecDeque<Instant>>>,
}

const WINDOW: Duration = Duration::from_secs(60);

impl FailureLimiter {
    /// At most `per_minute` failures per address in any minute.
    pub fn new(per_minute: u32) -> FailureLimiter {
        FailureLimiter { per_minute: per_minute.max(1), seen: Mutex::default() }
    }

    /// Seconds until `ip` may try again, when it is over the limit.
    fn blocked(&self, ip: IpAddr) -> Option<u64> {
        self.blocked_at(ip, Instant::now())
    }

    fn blocked_at(&self, ip: IpAddr, now: Instant) -> Option<u64> {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let times = seen.get(&ip)?;
        let age = |t: &Instant| now.saturating_duration_since(*t);
        let in_window = times.iter().filter(|t| age(t) < WINDOW).count();
        let oldest = times.front()?;
        (in_window >= self.per_minute as usize).then(|| WINDOW.saturating_sub(age(oldest)).as_secs().max(1))
    }

    /// Counts a failure; returns the count in the last minute, this one included.
    fn fail(&self, ip: IpAddr) -> u32 {
        self.fail_at(ip, Instant::now())
    }

    fn fail_at(&self, ip: IpAddr, now: Instant) -> u32 {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let age = |t: &Instant| now.saturating_duration_since(*t);
        if seen.len() > 10_000 {
            seen.retain(|_, times| times.back().is_some_and(|t| age(t) < WINDOW));
        }
        let times = seen.entry(ip).or_default();
        while times.front().is_some_and(|t| age(t) >= WINDOW) {
            times.pop_front();
        }
        times.push_back(now);
        let count = times.len() as u32;
        // Only the newest `per_minute` matter to `blocked`; failures past the limit are refused
        // before they are counted, so the queue stays short.
        while times.len() > self.per_minute as usize {
            times.pop_front();
        }
        count
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

/// The person a bearer ID or access token of the OpenID Connect provider stands for, or the 401
/// (counted and audited, the token itself never written anywhere).
pub async fn caller_for_token(state: &State, address: SocketAddr, tenant: &str, token: &str) -> Result<Caller, ApiError> {
    match state.sso.verify_bearer(token).await {
        Ok(identity) => match state.sso.caller(&identity, Some(address.to_string())) {
            Some(caller) => Ok(caller),
            None => Err(refuse(state, address, tenant, "no_group", "your groups are not granted any tenant here; ask an administrator").await),
        },
        Err(e) => Err(refuse(state, address, tenant, "invalid_token", &e.to_string()).await),
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
            // Not one of our keys: an OpenID Connect token, when a provider is configured.
            if !secret.starts_with(ragbox_service::KEY_PREFIX) && state.sso.oidc_configured() {
                return caller_for_token(state, address, &tenant, &secret).await.map(Authed);
            }
            return caller_for_key(state, address, &tenant, secret).await.map(Authed);
        }
        let Some(token) = session::session_cookie(&parts.headers) else {
            return Err(refuse(state, address, &tenant, "missing", "send `Authorization: Bearer <key>`; `ragbox keys create` makes keys").await);
        };
        session::check_origin(&parts.method, &parts.headers)?;
        match state.web.login(&token) {
            Some(session::Login::Key(secret)) => caller_for_key(state, address, &tenant, secret).await.map(Authed),
            Some(session::Login::Local) => Ok(Authed(session::local_caller(address))),
            Some(session::Login::Person { caller, .. }) => Ok(Authed(Caller { address: Some(address.to_string()), ..*caller })),
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
    if let Ok(Err(e)) | Err(e) = written.map_err(|e| ragbox_service::Error::Bug(e.to_string())) {
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

    /// Any minute holds at most the limit: failures just before and just after a minute's
    /// boundary are counted together (a window that restarted would let twice the limit
    /// through), and the wait is until the oldest counted failure is a minute old.
    #[test]
    fn the_window_slides() {
        let l = FailureLimiter::new(3);
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let t0 = Instant::now();
        let at = |s: f64| t0 + Duration::from_secs_f64(s);
        l.fail_at(ip, at(0.0));
        l.fail_at(ip, at(59.0));
        assert_eq!(l.fail_at(ip, at(59.5)), 3);
        assert_eq!(l.blocked_at(ip, at(59.6)), Some(1), "blocked until the first failure is a minute old");
        assert_eq!(l.blocked_at(ip, at(60.5)), None, "the first failure left the window");
        assert_eq!(l.fail_at(ip, at(60.5)), 3, "the two from second 59 still count");
        assert_eq!(l.blocked_at(ip, at(61.0)), Some(58), "until second 119");
        assert_eq!(l.blocked_at(ip, at(119.1)), None);
    }
}
