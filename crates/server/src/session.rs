//! Browser sessions: the session cookie (`HttpOnly`, `SameSite=Strict`) the web page holds instead
//! of a bearer key, who each session signed in as ([`Login`]: a key, checked against the catalog
//! on every request; a person the directory or the identity provider vouched for, until their
//! sign-in expires; or the local user through the one-time start-up link), the idle limit
//! [`SESSION_IDLE`], and the `Origin` check on state-changing requests ([`check_origin`]).
//! `auth` reads sessions to authenticate a request; `web` starts and ends them.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use sha2::{Digest, Sha256};

use ragbox_service::Caller;

use super::ApiError;

/// The session cookie's name.
const COOKIE: &str = "ragbox_session";

/// A session unused this long ends.
pub const SESSION_IDLE: Duration = Duration::from_secs(12 * 60 * 60);

/// Who a session signed in as.
#[derive(Clone)]
pub enum Login {
    /// A key (its secret, checked against the catalog on each request).
    Key(String),
    /// The local user, through the start-up link.
    Local,
    /// A person (LDAP or OpenID Connect), as they were granted at sign-in, until `expires_at`.
    Person {
        /// Who they are, their tenant, role and groups.
        caller: Box<Caller>,
        /// When the sign-in ends, idle or not.
        expires_at: SystemTime,
    },
}

impl Login {
    fn expired(&self) -> bool {
        matches!(self, Login::Person { expires_at, .. } if *expires_at <= SystemTime::now())
    }
}

struct Session {
    login: Login,
    last_seen: Instant,
}

/// Browser sessions and the one-time start-up link.
pub struct WebSessions {
    /// By sha256 of the cookie's token.
    sessions: Mutex<HashMap<String, Session>>,
    /// sha256 of the start-up link's token, until it is used.
    signin: Mutex<Option<String>>,
}

fn digest(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

fn random_token() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the operating system's random source");
    hex::encode(bytes)
}

impl WebSessions {
    /// No sessions; a fresh one-time sign-in token, returned for the start-up line.
    pub fn new() -> (WebSessions, String) {
        let token = random_token();
        let sessions = WebSessions { sessions: Mutex::default(), signin: Mutex::new(Some(digest(&token))) };
        (sessions, token)
    }

    /// Starts a session; returns the cookie's token.
    pub fn start(&self, login: Login) -> String {
        let token = random_token();
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions.retain(|_, s| s.last_seen.elapsed() < SESSION_IDLE);
        sessions.insert(digest(&token), Session { login, last_seen: Instant::now() });
        token
    }

    /// The login behind a cookie's token, if its session is alive (and keeps it alive).
    pub fn login(&self, token: &str) -> Option<Login> {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        let key = digest(token);
        match sessions.get_mut(&key) {
            Some(s) if s.last_seen.elapsed() < SESSION_IDLE && !s.login.expired() => {
                s.last_seen = Instant::now();
                Some(s.login.clone())
            }
            Some(_) => {
                sessions.remove(&key);
                None
            }
            None => None,
        }
    }

    /// Ends the session of a cookie's token.
    pub fn end(&self, token: &str) {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner()).remove(&digest(token));
    }

    /// Uses up the start-up link's token: true once, for the right token.
    pub fn redeem(&self, token: &str) -> bool {
        let mut signin = self.signin.lock().unwrap_or_else(|e| e.into_inner());
        let matches = signin.as_deref().is_some_and(|d| {
            use subtle::ConstantTimeEq;
            bool::from(d.as_bytes().ct_eq(digest(token).as_bytes()))
        });
        if matches {
            *signin = None;
        }
        matches
    }
}

/// The caller the start-up link signs in: the local user (like the command line), named so in
/// the audit log.
pub fn local_caller(address: SocketAddr) -> Caller {
    Caller { name: "local sign-in link".into(), address: Some(address.to_string()), ..Caller::local() }
}

/// The session cookie's token, if the request has one.
pub fn session_cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.to_string())
        .filter(|v| !v.is_empty())
}

/// Refuses a state-changing request whose `Origin` is not this server (403): a page elsewhere
/// cannot make the browser act with the session (SameSite=Strict already keeps the cookie off
/// cross-site requests; this holds for same-site origins on other ports too).
pub fn check_origin(method: &Method, headers: &HeaderMap) -> Result<(), ApiError> {
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return Ok(());
    }
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
    let origin = headers.get(header::ORIGIN).and_then(|h| h.to_str().ok()).unwrap_or("");
    let same = !host.is_empty() && (origin == format!("http://{host}") || origin == format!("https://{host}"));
    if same {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "cross_origin",
            "this request did not come from ragbox's own page (its Origin is not this server); use a key with Authorization: Bearer",
        ))
    }
}

/// The `Set-Cookie` value of a session's token (`max_age` 0 ends it).
pub fn cookie(token: &str, max_age: u64) -> HeaderValue {
    HeaderValue::from_str(&format!("{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/; Max-Age={max_age}")).expect("a cookie of hex digits")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_up_link_works_once() {
        let (web, token) = WebSessions::new();
        assert!(!web.redeem("not-it"));
        assert!(web.redeem(&token));
        assert!(!web.redeem(&token), "a used link does not sign in again");
    }

    #[test]
    fn sessions_end_at_sign_out() {
        let (web, _) = WebSessions::new();
        let t = web.start(Login::Local);
        assert!(web.login(&t).is_some());
        assert!(web.login("other").is_none());
        web.end(&t);
        assert!(web.login(&t).is_none());
    }

    #[test]
    fn a_persons_session_ends_when_their_sign_in_expires() {
        let (web, _) = WebSessions::new();
        let person = |expires_at| Login::Person { caller: Box::new(Caller::local()), expires_at };
        let live = web.start(person(SystemTime::now() + Duration::from_secs(60)));
        let gone = web.start(person(SystemTime::now() - Duration::from_secs(1)));
        assert!(web.login(&live).is_some());
        assert!(web.login(&gone).is_none(), "an expired sign-in is refused however recently it was used");
    }

    #[test]
    fn cookie_and_origin_checks() {
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, HeaderValue::from_static("a=b; ragbox_session=abc123; c=d"));
        assert_eq!(session_cookie(&h).as_deref(), Some("abc123"));
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:7070"));
        assert!(check_origin(&Method::GET, &h).is_ok(), "reads need no origin");
        assert!(check_origin(&Method::POST, &h).is_err(), "a write without Origin is refused");
        h.insert(header::ORIGIN, HeaderValue::from_static("http://127.0.0.1:7070"));
        assert!(check_origin(&Method::POST, &h).is_ok());
        h.insert(header::ORIGIN, HeaderValue::from_static("http://127.0.0.1:8080"));
        assert!(check_origin(&Method::DELETE, &h).is_err(), "another port is another origin");
    }
}
