//! Sign-in against an LDAP directory (`[sso.ldap]`): the person's user name and password are
//! checked by binding to the directory as them, and their groups are read from it.
//!
//! The steps of [`authenticate`], each under `timeout_ms`:
//! 1. an empty user name or password is refused before any connection (a simple bind with a DN
//!    and an empty password is an *unauthenticated* bind, which many servers let succeed);
//! 2. a first connection binds as the service account (`bind_dn` with the password in
//!    `bind_password_file`) or stays anonymous, and searches `user_base` with `user_filter`,
//!    where `{user}` is the user name escaped for an LDAP filter (RFC 4515), so `*` or `)(`
//!    match only themselves;
//! 3. exactly one entry must match, else the sign-in is refused with the same
//!    [`LdapError::InvalidCredentials`] as a wrong password;
//! 4. a second, new connection binds as that entry's DN with the password; the service
//!    account's connection is never rebound as the user;
//! 5. the first connection searches `group_base` with `group_filter` (`{dn}`: the user's DN,
//!    `{user}`: the user name, both escaped) and the `group_name_attribute` values of the
//!    groups found become [`Identity::groups`], sorted and deduplicated.
//!
//! `ldaps://` URLs and `starttls = true` use rustls with the ring provider and the system's CA
//! certificates (`SSL_CERT_FILE` / `SSL_CERT_DIR` are honoured, see rustls-native-certs). The
//! rustls configuration is built here with an explicit provider because ldap3's own
//! `ClientConfig::builder()` panics in a build whose rustls has more than one provider enabled.

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use ldap3::{ldap_escape, Ldap, LdapConnAsync, LdapConnSettings, Scope, SearchEntry};

use super::Identity;
use ragbox_service::config::LdapSection;

/// LDAP result code of a bind with a wrong password or an unknown DN (RFC 4511).
const RC_INVALID_CREDENTIALS: u32 = 49;
/// LDAP result code of a search whose base does not exist.
const RC_NO_SUCH_OBJECT: u32 = 32;
/// LDAP result code of an operation the bound identity may not do.
const RC_INSUFFICIENT_ACCESS: u32 = 50;
/// LDAP result code of a search that matched more entries than the server returns.
const RC_SIZE_LIMIT_EXCEEDED: u32 = 4;
/// LDAP result code of a refused operation (OpenLDAP: an unauthenticated bind, a locked account).
const RC_UNWILLING_TO_PERFORM: u32 = 53;

/// Why a sign-in through LDAP did not succeed. The messages say what to do next; none of them
/// contains a password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LdapError {
    /// The user name or the password is wrong, or empty, or the user name matched no entry or
    /// several: one message for all of them, so that a caller cannot tell which users exist.
    InvalidCredentials,
    /// The directory at this URL could not be reached: connection refused, timed out, or closed.
    Unreachable(String),
    /// The `[sso.ldap]` settings (or the directory's setup for them) are wrong; says what.
    Misconfigured(String),
    /// The directory answered with an error that is neither of the above; says which.
    Directory(String),
}

impl fmt::Display for LdapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LdapError::InvalidCredentials => write!(
                f,
                "the user name or password is not right; check both and try again"
            ),
            LdapError::Unreachable(url) => write!(
                f,
                "the directory at {url} cannot be reached; check that the LDAP server is \
                 running and reachable from here, and the url in [sso.ldap]"
            ),
            LdapError::Misconfigured(what) => write!(
                f,
                "LDAP sign-in is misconfigured: {what}; fix [sso.ldap] in the settings"
            ),
            LdapError::Directory(what) => write!(
                f,
                "the directory refused the sign-in: {what}; try again, and if it persists \
                 ask the directory's administrator"
            ),
        }
    }
}

impl std::error::Error for LdapError {}

/// Checks `user` and `password` against the directory of `settings` and returns who they are,
/// with their groups, valid until now + `session_hours`. See the module's documentation for
/// the steps; every network operation is bounded by `timeout_ms`.
pub async fn authenticate(
    settings: &LdapSection,
    user: &str,
    password: &str,
) -> Result<Identity, LdapError> {
    // Before anything else, and before any connection: an empty password would make the user
    // bind an unauthenticated one, which a lenient server accepts as a success.
    if user.is_empty() || password.is_empty() {
        return Err(LdapError::InvalidCredentials);
    }
    let checked = check_settings(settings)?;
    let service_password = read_service_password(settings)?;

    let mut service = connect(settings, checked.timeout).await?;
    let result = lookup(
        settings,
        &checked,
        &mut service,
        service_password.as_deref(),
        user,
        password,
    )
    .await;
    close(&mut service, checked.timeout).await;
    let (dn, groups) = result?;

    let expires_at = SystemTime::now()
        .checked_add(Duration::from_secs(
            settings.session_hours.saturating_mul(3600),
        ))
        .ok_or_else(|| {
            LdapError::Misconfigured(format!(
                "session_hours = {} is too large",
                settings.session_hours
            ))
        })?;
    Ok(Identity {
        subject: dn,
        issuer: settings.url.clone(),
        name: user.to_string(),
        groups,
        expires_at,
    })
}

/// The parts of the settings that [`check_settings`] derived.
struct Checked {
    /// `timeout_ms`, for each operation.
    timeout: Duration,
}

/// Refuses settings that cannot work or would be unsafe, before any connection.
fn check_settings(settings: &LdapSection) -> Result<Checked, LdapError> {
    let url = settings.url.as_str();
    let tls_url = if url.starts_with("ldaps://") {
        true
    } else if url.starts_with("ldap://") {
        false
    } else {
        return Err(LdapError::Misconfigured(format!(
            "url {url:?} must start with ldap:// or ldaps://"
        )));
    };
    // Passwords go to this host: it must be on the allowlist (checked at load too).
    let host = url::Url::parse(url).ok().and_then(|u| u.host_str().map(str::to_string)).unwrap_or_default();
    let allowed = ragbox_service::allowlist::HostAllowlist::parse(&settings.allow_hosts).map(|a| a.allows(&host)).unwrap_or(false);
    if !allowed {
        return Err(LdapError::Misconfigured(format!("the directory's host `{host}` is not in sso.ldap.allow_hosts")));
    }
    if tls_url && settings.starttls {
        return Err(LdapError::Misconfigured(
            "starttls = true is for ldap:// URLs; an ldaps:// URL is TLS already".into(),
        ));
    }
    if settings.timeout_ms == 0 {
        return Err(LdapError::Misconfigured(
            "timeout_ms must be more than 0".into(),
        ));
    }
    if settings.session_hours == 0 {
        return Err(LdapError::Misconfigured(
            "session_hours must be at least 1".into(),
        ));
    }
    if !settings.user_filter.contains("{user}") {
        return Err(LdapError::Misconfigured(format!(
            "user_filter {:?} must contain {{user}}",
            settings.user_filter
        )));
    }
    if !settings.group_filter.contains("{dn}") && !settings.group_filter.contains("{user}") {
        // Without either, every user would get every group.
        return Err(LdapError::Misconfigured(format!(
            "group_filter {:?} must contain {{dn}} or {{user}}",
            settings.group_filter
        )));
    }
    if settings.group_name_attribute.is_empty() {
        return Err(LdapError::Misconfigured(
            "group_name_attribute is empty".into(),
        ));
    }
    match (&settings.bind_dn, &settings.bind_password_file) {
        (Some(_), None) => {
            return Err(LdapError::Misconfigured(
                "bind_dn is set but bind_password_file is not (a DN with no password is an \
                 unauthenticated bind)"
                    .into(),
            ))
        }
        (None, Some(_)) => {
            return Err(LdapError::Misconfigured(
                "bind_password_file is set but bind_dn is not".into(),
            ))
        }
        _ => {}
    }
    Ok(Checked {
        timeout: Duration::from_millis(settings.timeout_ms),
    })
}

/// The service account's password from `bind_password_file`, less one trailing newline
/// (`\n` or `\r\n`); `None` for anonymous searches.
fn read_service_password(settings: &LdapSection) -> Result<Option<String>, LdapError> {
    let Some(path) = &settings.bind_password_file else {
        return Ok(None);
    };
    let content = std::fs::read_to_string(path).map_err(|e| {
        LdapError::Misconfigured(format!(
            "bind_password_file {} cannot be read ({e})",
            path.display()
        ))
    })?;
    let password = content
        .strip_suffix("\r\n")
        .or_else(|| content.strip_suffix('\n'))
        .unwrap_or(&content)
        .to_string();
    if password.is_empty() {
        return Err(LdapError::Misconfigured(format!(
            "bind_password_file {} is empty",
            path.display()
        )));
    }
    Ok(Some(password))
}

/// Steps 2 to 5 on the service connection `service`: the user's DN and their group names.
async fn lookup(
    settings: &LdapSection,
    checked: &Checked,
    service: &mut Ldap,
    service_password: Option<&str>,
    user: &str,
    password: &str,
) -> Result<(String, Vec<String>), LdapError> {
    let timeout = checked.timeout;
    if let (Some(bind_dn), Some(bind_password)) = (&settings.bind_dn, service_password) {
        let bound = service
            .with_timeout(timeout)
            .simple_bind(bind_dn, bind_password)
            .await
            .map_err(|e| op_error(settings, e, "the service account's bind"))?;
        match bound.rc {
            0 => {}
            RC_INVALID_CREDENTIALS => {
                return Err(LdapError::Misconfigured(format!(
                    "the directory refused the service account {bind_dn:?}: check bind_dn and \
                     the password in bind_password_file"
                )))
            }
            rc => {
                return Err(LdapError::Misconfigured(format!(
                    "the service account {bind_dn:?} cannot bind (result code {rc}: {})",
                    bound.text
                )))
            }
        }
    }

    let user_filter = substitute(&settings.user_filter, user, None);
    let found = service
        .with_timeout(timeout)
        .search(
            &settings.user_base,
            Scope::Subtree,
            &user_filter,
            vec!["1.1"],
        )
        .await
        .map_err(|e| op_error(settings, e, "the search for the user"))?;
    let (entries, result) = (found.0, found.1);
    match result.rc {
        0 => {}
        RC_SIZE_LIMIT_EXCEEDED => {
            tracing::warn!(filter = %settings.user_filter, "LDAP user search matched too many entries; sign-in refused");
            return Err(LdapError::InvalidCredentials);
        }
        rc => {
            return Err(search_error(
                rc,
                &result.text,
                "user_base",
                &settings.user_base,
            ))
        }
    }
    let dns: Vec<String> = entries
        .into_iter()
        .filter(|entry| !entry.is_ref())
        .map(|entry| SearchEntry::construct(entry).dn)
        .collect();
    let dn = match dns.as_slice() {
        [dn] if !dn.is_empty() => dn.clone(),
        [] => return Err(LdapError::InvalidCredentials),
        _ => {
            tracing::warn!(
                matches = dns.len(),
                filter = %settings.user_filter,
                "LDAP user search matched more than one entry; sign-in refused"
            );
            return Err(LdapError::InvalidCredentials);
        }
    };

    // The user's own bind, on a connection of its own.
    let mut own = connect(settings, timeout).await?;
    let bound = own.with_timeout(timeout).simple_bind(&dn, password).await;
    close(&mut own, timeout).await;
    let bound = bound.map_err(|e| op_error(settings, e, "the user's bind"))?;
    match bound.rc {
        0 => {}
        RC_INVALID_CREDENTIALS => return Err(LdapError::InvalidCredentials),
        RC_UNWILLING_TO_PERFORM => {
            // A locked or expired account, a password policy: refused like a wrong password.
            tracing::info!(rc = bound.rc, text = %bound.text, "LDAP bind refused by the directory");
            return Err(LdapError::InvalidCredentials);
        }
        rc => {
            return Err(LdapError::Directory(format!(
                "the bind failed with result code {rc} ({})",
                bound.text
            )))
        }
    }

    let group_filter = substitute(&settings.group_filter, user, Some(&dn));
    let attribute = settings.group_name_attribute.as_str();
    let found = service
        .with_timeout(timeout)
        .search(
            &settings.group_base,
            Scope::Subtree,
            &group_filter,
            vec![attribute],
        )
        .await
        .map_err(|e| op_error(settings, e, "the search for the user's groups"))?;
    let (entries, result) = (found.0, found.1);
    if result.rc != 0 {
        return Err(search_error(
            result.rc,
            &result.text,
            "group_base",
            &settings.group_base,
        ));
    }
    let mut groups: Vec<String> = entries
        .into_iter()
        .filter(|entry| !entry.is_ref())
        .map(SearchEntry::construct)
        .flat_map(|entry| {
            // The server may spell the attribute's name in another case than the settings.
            entry
                .attrs
                .into_iter()
                .filter(|(name, _)| name.eq_ignore_ascii_case(attribute))
                .flat_map(|(_, values)| values)
                .collect::<Vec<_>>()
        })
        .filter(|name| !name.is_empty())
        .collect();
    groups.sort();
    groups.dedup();
    Ok((dn, groups))
}

/// `template` with each `{user}` replaced by `user` and each `{dn}` by `dn` (when given), both
/// escaped for an LDAP filter (`*`, `(`, `)`, `\` and NUL become `\2a`, `\28`, `\29`, `\5c`,
/// `\00`). One pass: a replaced value is never searched for placeholders again.
fn substitute(template: &str, user: &str, dn: Option<&str>) -> String {
    let mut out = String::with_capacity(template.len() + user.len());
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let tail = &rest[start..];
        if let Some(after) = tail.strip_prefix("{user}") {
            out.push_str(&ldap_escape(user));
            rest = after;
        } else if let (Some(after), Some(dn)) = (tail.strip_prefix("{dn}"), dn) {
            out.push_str(&ldap_escape(dn));
            rest = after;
        } else {
            out.push('{');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}

/// A new connection to `settings.url`, with StartTLS when asked, bounded by `timeout`; its
/// driver runs as a task of its own until the connection closes.
async fn connect(settings: &LdapSection, timeout: Duration) -> Result<Ldap, LdapError> {
    let mut conn_settings = LdapConnSettings::new().set_conn_timeout(timeout);
    if settings.starttls || settings.url.starts_with("ldaps://") {
        conn_settings = conn_settings
            .set_config(tls_config()?)
            .set_starttls(settings.starttls);
    }
    let connecting = LdapConnAsync::with_settings(conn_settings, &settings.url);
    // ldap3 bounds the connection (TCP, StartTLS, TLS) by conn_timeout; this is a backstop.
    let (conn, ldap) =
        match tokio::time::timeout(timeout + Duration::from_millis(100), connecting).await {
            Ok(Ok(pair)) => pair,
            Ok(Err(e)) => return Err(connect_error(settings, e)),
            Err(_) => return Err(LdapError::Unreachable(settings.url.clone())),
        };
    ldap3::drive!(conn);
    Ok(ldap)
}

/// Closes `ldap` politely (an Unbind), without waiting longer than `timeout` or failing.
async fn close(ldap: &mut Ldap, timeout: Duration) {
    let _ = tokio::time::timeout(timeout, ldap.unbind()).await;
}

/// The rustls client configuration of TLS connections: the ring provider, the system's CA
/// certificates. Built once; a failure is not kept, so a fixed system is seen on the next try.
fn tls_config() -> Result<Arc<rustls::ClientConfig>, LdapError> {
    static CONFIG: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    if let Some(config) = CONFIG.get() {
        return Ok(config.clone());
    }
    let found = rustls_native_certs::load_native_certs();
    let mut roots = rustls::RootCertStore::empty();
    let (added, _unparsable) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        return Err(LdapError::Misconfigured(format!(
            "TLS needs CA certificates and none were found ({} errors); install ca-certificates \
             or point SSL_CERT_FILE at the directory's CA",
            found.errors.len()
        )));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| LdapError::Misconfigured(format!("TLS cannot be set up ({e})")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(CONFIG.get_or_init(|| Arc::new(config)).clone())
}

/// The rustls error inside `e`, if a TLS handshake failed.
fn tls_cause(e: &ldap3::LdapError) -> Option<String> {
    match e {
        ldap3::LdapError::Rustls { source } => Some(source.to_string()),
        ldap3::LdapError::Io { source } => source
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            .map(|tls| tls.to_string()),
        _ => None,
    }
}

/// A failed connection as an [`LdapError`].
fn connect_error(settings: &LdapSection, e: ldap3::LdapError) -> LdapError {
    let tls = settings.starttls || settings.url.starts_with("ldaps://");
    let closed_in_handshake = matches!(&e, ldap3::LdapError::Io { source }
        if source.kind() == std::io::ErrorKind::UnexpectedEof);
    // A server that does not speak TLS on that port closes the connection on the ClientHello.
    let tls_cause = tls_cause(&e).or_else(|| {
        (tls && closed_in_handshake).then(|| "the server closed the connection".into())
    });
    if let Some(tls) = tls_cause {
        return LdapError::Misconfigured(format!(
            "TLS with {} failed ({tls}); check that the server speaks {} there and that its \
             certificate is for that host name and signed by a CA this machine trusts",
            settings.url,
            if settings.starttls { "StartTLS" } else { "TLS" }
        ));
    }
    match e {
        ldap3::LdapError::LdapResult { result } => LdapError::Misconfigured(format!(
            "{} refused StartTLS (result code {}: {}); set starttls = false or enable TLS on the server",
            settings.url, result.rc, result.text
        )),
        ldap3::LdapError::UrlParsing { source } => {
            LdapError::Misconfigured(format!("url {:?} is not a URL ({source})", settings.url))
        }
        ldap3::LdapError::DNSName { source } => LdapError::Misconfigured(format!(
            "url {:?} has no host name TLS can check ({source})",
            settings.url
        )),
        ldap3::LdapError::UnknownScheme(scheme) => {
            LdapError::Misconfigured(format!("url scheme {scheme:?} is not supported"))
        }
        _ => LdapError::Unreachable(settings.url.clone()),
    }
}

/// A failed operation (`what`) on an open connection as an [`LdapError`].
fn op_error(settings: &LdapSection, e: ldap3::LdapError, what: &str) -> LdapError {
    match e {
        ldap3::LdapError::FilterParsing => LdapError::Misconfigured(format!(
            "{what} used a filter that is not a valid LDAP filter (user_filter {:?}, group_filter {:?})",
            settings.user_filter, settings.group_filter
        )),
        ldap3::LdapError::LdapResult { result } => LdapError::Directory(format!(
            "{what} failed with result code {} ({})",
            result.rc, result.text
        )),
        // Timeouts, a closed connection, I/O errors: the directory went away.
        _ => LdapError::Unreachable(settings.url.clone()),
    }
}

/// A search of `base` (the setting `setting`) that ended with result code `rc`.
fn search_error(rc: u32, text: &str, setting: &str, base: &str) -> LdapError {
    match rc {
        RC_NO_SUCH_OBJECT => LdapError::Misconfigured(format!(
            "{setting} {base:?} does not exist in the directory"
        )),
        RC_INSUFFICIENT_ACCESS => LdapError::Misconfigured(format!(
            "the search account may not search {setting} {base:?}; check bind_dn and the \
             directory's access rules"
        )),
        rc => LdapError::Directory(format!(
            "the search of {base:?} failed with result code {rc} ({text})"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Settings pointing at a port nothing listens on (connecting would fail loudly).
    fn settings() -> LdapSection {
        LdapSection {
            url: "ldap://127.0.0.1:1".into(),
            starttls: false,
            bind_dn: None,
            bind_password_file: None,
            user_base: "ou=people,dc=ragbox,dc=test".into(),
            user_filter: "(uid={user})".into(),
            group_base: "ou=groups,dc=ragbox,dc=test".into(),
            group_filter: "(&(objectClass=groupOfNames)(member={dn}))".into(),
            group_name_attribute: "cn".into(),
            session_hours: 12,
            timeout_ms: 5000,
            allow_hosts: vec!["127.0.0.1".into()],
        }
    }

    #[test]
    fn substitution_escapes_filter_syntax() {
        assert_eq!(substitute("(uid={user})", "alice", None), "(uid=alice)");
        assert_eq!(substitute("(uid={user})", "*", None), r"(uid=\2a)");
        assert_eq!(
            substitute("(uid={user})", "alice)(uid=*", None),
            r"(uid=alice\29\28uid=\2a)"
        );
        assert_eq!(substitute("(uid={user})", r"a\b", None), r"(uid=a\5cb)");
        assert_eq!(substitute("(uid={user})", "a\0b", None), r"(uid=a\00b)");
        assert_eq!(
            substitute("(&(member={dn})(x={user}))", "bo*", Some("uid=b(o),dc=t")),
            r"(&(member=uid=b\28o\29,dc=t)(x=bo\2a))"
        );
    }

    #[test]
    fn substitution_is_one_pass() {
        // A user name that looks like a placeholder stays itself.
        assert_eq!(
            substitute("(&(uid={user})(member={dn}))", "{dn}", Some("X")),
            "(&(uid={dn})(member=X))"
        );
        assert_eq!(substitute("(cn={other}{user})", "u", None), "(cn={other}u)");
        assert_eq!(substitute("(cn={)", "u", None), "(cn={)");
    }

    #[tokio::test]
    async fn empty_password_or_user_is_refused_without_a_connection() {
        // The URL is not even an LDAP URL: had a connection been tried, the error would differ.
        let mut s = settings();
        s.url = "not a url".into();
        assert_eq!(
            authenticate(&s, "alice", "").await,
            Err(LdapError::InvalidCredentials)
        );
        assert_eq!(
            authenticate(&s, "", "alice-pw").await,
            Err(LdapError::InvalidCredentials)
        );
        assert!(matches!(
            authenticate(&s, "alice", "pw").await,
            Err(LdapError::Misconfigured(_))
        ));
    }

    #[tokio::test]
    async fn unsafe_settings_are_refused() {
        let mut s = settings();
        s.group_filter = "(objectClass=groupOfNames)".into();
        assert!(matches!(
            authenticate(&s, "a", "b").await,
            Err(LdapError::Misconfigured(_))
        ));
        let mut s = settings();
        s.bind_dn = Some("cn=ragbox,ou=services,dc=ragbox,dc=test".into());
        assert!(matches!(
            authenticate(&s, "a", "b").await,
            Err(LdapError::Misconfigured(_))
        ));
        let mut s = settings();
        s.url = "ldaps://127.0.0.1:1".into();
        s.starttls = true;
        assert!(matches!(
            authenticate(&s, "a", "b").await,
            Err(LdapError::Misconfigured(_))
        ));
    }

    #[test]
    fn password_file_loses_one_trailing_newline() {
        let dir = std::env::temp_dir().join(format!("ragbox-ldap-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut s = settings();
        s.bind_dn = Some("cn=x".into());
        for (content, expected) in [
            ("pw\n", "pw"),
            ("pw\r\n", "pw"),
            ("pw", "pw"),
            (" pw \n\n", " pw \n"),
        ] {
            let path = dir.join("pw");
            std::fs::write(&path, content).unwrap();
            s.bind_password_file = Some(path);
            assert_eq!(
                read_service_password(&s).unwrap().as_deref(),
                Some(expected)
            );
        }
        std::fs::write(dir.join("pw"), "\n").unwrap();
        assert!(matches!(
            read_service_password(&s),
            Err(LdapError::Misconfigured(_))
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn messages_never_tell_unknown_users_from_wrong_passwords() {
        let message = LdapError::InvalidCredentials.to_string();
        assert!(message.contains("user name or password"));
        assert!(LdapError::Unreachable("ldap://h:1".into())
            .to_string()
            .contains("the directory at ldap://h:1 cannot be reached"));
    }
}
