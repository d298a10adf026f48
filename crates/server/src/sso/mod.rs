//! Sign-in with the organisation's identity: an LDAP directory ([`ldap`]) or an OpenID Connect
//! provider ([`oidc`]). Either yields an [`Identity`]; `[[sso.groups]]` maps its groups to a
//! tenant and a role ([`grant`]), and its groups become the audience whose documents it reads.
//! [`Sso`] holds the settings, the provider once discovered (on first use, from hosts on
//! `sso.oidc.allow_hosts` only) and the sign-ins under way (their PKCE verifiers, by `state`).
//! Passwords, codes and tokens are never logged or audited.

pub mod ldap;
pub mod oidc;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use ragbox_service::config::{GroupGrant, SsoSection};
use ragbox_service::{Caller, KeyRole, Person};

/// How long a browser may take between leaving for the provider and coming back.
const PENDING_FOR: Duration = Duration::from_secs(600);

/// A person the directory or the provider vouched for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The stable id: the entry's DN (LDAP) or the token's `sub` (OIDC).
    pub subject: String,
    /// Who vouched: the directory's URL (LDAP) or the token's `iss` (OIDC).
    pub issuer: String,
    /// The name shown on the page and in the audit.
    pub name: String,
    /// The person's groups, sorted and distinct.
    pub groups: Vec<String>,
    /// When the sign-in ends.
    pub expires_at: SystemTime,
}

/// The tenant and role a person's groups grant: the first `[[sso.groups]]` entry whose group is
/// one of theirs (or `*`); `None` when no entry does, and the sign-in is refused.
pub fn grant<'a>(grants: &'a [GroupGrant], identity: &Identity) -> Option<&'a GroupGrant> {
    grants.iter().find(|g| g.group == "*" || identity.groups.iter().any(|mine| *mine == g.group))
}

/// The server's sign-in settings and state.
pub struct Sso {
    settings: SsoSection,
    provider: tokio::sync::OnceCell<oidc::Provider>,
    pending: Mutex<HashMap<String, (oidc::Pending, Instant)>>,
}

impl Sso {
    /// Sign-in as `[sso]` configures it (nothing is contacted until someone signs in).
    pub fn new(settings: SsoSection) -> Sso {
        Sso { settings, provider: tokio::sync::OnceCell::new(), pending: Mutex::default() }
    }

    /// Whether people sign in with an LDAP directory.
    pub fn ldap_configured(&self) -> bool {
        self.settings.ldap.is_some()
    }

    /// Whether people sign in with an OpenID Connect provider.
    pub fn oidc_configured(&self) -> bool {
        self.settings.oidc.is_some()
    }

    /// The caller an identity signs in as, or `None` when no group of theirs is granted a tenant.
    pub fn caller(&self, identity: &Identity, address: Option<String>) -> Option<Caller> {
        let g = grant(&self.settings.groups, identity)?;
        let role: KeyRole = g.role.parse().ok()?;
        let person = Person { subject: identity.subject.clone(), issuer: identity.issuer.clone() };
        Some(Caller::person(person, &identity.name, &identity.groups, &g.tenant, role, address))
    }

    /// Checks a user name and password against the directory.
    pub async fn ldap_sign_in(&self, user: &str, password: &str) -> Result<Identity, String> {
        let settings = self.settings.ldap.as_ref().ok_or("LDAP sign-in is not configured here ([sso.ldap])")?;
        ldap::authenticate(settings, user, password).await.map_err(|e| e.to_string())
    }

    async fn provider(&self) -> Result<&oidc::Provider, String> {
        let settings = self.settings.oidc.as_ref().ok_or("OpenID Connect sign-in is not configured here ([sso.oidc])")?;
        self.provider.get_or_try_init(|| oidc::Provider::discover(settings)).await.map_err(|e| e.to_string())
    }

    /// Starts a browser's sign-in: the provider's authorisation URL to send it to.
    pub async fn oidc_begin(&self) -> Result<String, String> {
        let (url, pending) = self.provider().await?.begin();
        let mut all = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        all.retain(|_, (_, at)| at.elapsed() < PENDING_FOR);
        all.insert(pending.state.clone(), (pending, Instant::now()));
        Ok(url)
    }

    /// Finishes a browser's sign-in: the `state` it came back with must be one this server
    /// started (once, within [`PENDING_FOR`]); the code is exchanged and the ID token verified.
    pub async fn oidc_finish(&self, state: &str, code: &str) -> Result<Identity, String> {
        let pending = self.pending.lock().unwrap_or_else(|e| e.into_inner()).remove(state);
        let Some((pending, _)) = pending.filter(|(_, at)| at.elapsed() < PENDING_FOR) else {
            return Err("this sign-in was not started here, or took too long; sign in again".into());
        };
        self.provider().await?.finish(&pending, code).await.map_err(|e| e.to_string())
    }

    /// Verifies a bearer ID or access token of the provider.
    pub async fn verify_bearer(&self, token: &str) -> Result<Identity, String> {
        self.provider().await?.verify_bearer(token).await.map_err(|e| e.to_string())
    }
}
