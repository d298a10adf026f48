//! Which hosts ragbox may connect to: `generate.allow_hosts` (a network generator, which is sent
//! prompts), `sso.oidc.allow_hosts` and `sso.ldap.allow_hosts` (sign-in). A leaf module (imports
//! only `error`): the configuration checks each at load, the client again before it connects.
//!
//! Prompts carry the tenant's passages, so a remote backend talks only to hosts the
//! configuration names. An entry is a host name (matched exactly, case-insensitively), an IP
//! address, or a network in CIDR form (`10.0.0.0/8`, `fd00::/8`). Nothing is allowed by default:
//! loopback and private ranges must be named too, so a changed URL alone never sends text
//! anywhere new. A name is not resolved to be matched against networks: naming a host trusts
//! whatever the network's resolver says it is.
//!
//! ```
//! use ragbox_core::allowlist::HostAllowlist;
//! let allow = HostAllowlist::parse(&["127.0.0.1".into(), "10.0.0.0/8".into(), "gpu-box.lan".into()]).unwrap();
//! assert!(allow.check("http://10.1.2.3:8080/v1").is_ok());
//! assert!(allow.check("http://GPU-BOX.lan/v1").is_ok());
//! assert!(allow.check("http://192.168.1.9:8080/v1").is_err());
//! ```

use std::net::IpAddr;

use ipnet::IpNet;
use url::Url;

use crate::error::{Error, Result};

/// Hosts a network generator may talk to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostAllowlist {
    names: Vec<String>,
    networks: Vec<IpNet>,
}

/// One allowlist entry, parsed.
enum Entry {
    Name(String),
    Network(IpNet),
}

fn entry(text: &str) -> Result<Entry> {
    let t = text.trim();
    if t.is_empty() || t.contains("://") || (t.contains('/') && t.parse::<IpNet>().is_err()) {
        return Err(Error::Config(format!(
            "generate.allow_hosts: `{text}` is not a host name, an IP address or a CIDR network (write `10.0.0.5`, `10.0.0.0/8` or `gpu-box.lan`, without a scheme or port)"
        )));
    }
    if let Ok(net) = t.parse::<IpNet>() {
        return Ok(Entry::Network(net));
    }
    match t.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
        Ok(ip) => Ok(Entry::Network(IpNet::from(ip))),
        Err(_) if t.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.') => Ok(Entry::Name(t.to_ascii_lowercase())),
        Err(_) => Err(Error::Config(format!("generate.allow_hosts: `{text}` is not a host name, an IP address or a CIDR network"))),
    }
}

impl HostAllowlist {
    /// The configured entries; an entry that is none of the three forms is a configuration error.
    pub fn parse(entries: &[String]) -> Result<HostAllowlist> {
        let mut allow = HostAllowlist::default();
        for e in entries {
            match entry(e)? {
                Entry::Name(n) => allow.names.push(n),
                Entry::Network(n) => allow.networks.push(n),
            }
        }
        Ok(allow)
    }

    /// Whether `host` (a name, matched case-insensitively, or an address, IPv6 bracketed or not)
    /// is allowed.
    pub fn allows(&self, host: &str) -> bool {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        match bare.parse::<IpAddr>() {
            Ok(ip) => self.networks.iter().any(|n| n.contains(&ip)),
            Err(_) => self.names.iter().any(|n| n.eq_ignore_ascii_case(bare)),
        }
    }

    /// An inference server's URL (http or https): its host, if `generate.allow_hosts` allows it.
    pub fn check(&self, url: &str) -> Result<String> {
        let parsed = Url::parse(url).map_err(|e| Error::Config(format!("`{url}` is not a URL ({e}); write it as http://HOST:PORT/v1")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(Error::Config(format!("`{url}`: only http and https inference servers are supported")));
        }
        self.check_for(url, "generate.allow_hosts", "prompts carry your passages")
    }

    /// The host of `url` (any scheme), if the list allows it; else an error naming the host, the
    /// `setting` to add it to, and `why` that matters.
    pub fn check_for(&self, url: &str, setting: &str, why: &str) -> Result<String> {
        let parsed = Url::parse(url).map_err(|e| Error::Config(format!("`{url}` is not a URL ({e})")))?;
        let host = parsed.host_str().ok_or_else(|| Error::Config(format!("`{url}` names no host")))?.to_string();
        if self.allows(&host) {
            Ok(host)
        } else {
            Err(Error::Config(format!(
                "host `{host}` of {url} is not in {setting} ({}); {why}, so add it there only if ragbox may connect to that host",
                self.describe()
            )))
        }
    }

    /// The entries, for messages and `doctor`.
    pub fn describe(&self) -> String {
        let all: Vec<String> = self.names.iter().cloned().chain(self.networks.iter().map(|n| n.to_string())).collect();
        if all.is_empty() {
            "empty".into()
        } else {
            all.join(", ")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allow(entries: &[&str]) -> HostAllowlist {
        HostAllowlist::parse(&entries.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn nothing_is_allowed_unless_named_loopback_included() {
        let empty = allow(&[]);
        for url in ["http://127.0.0.1:8080/v1", "http://localhost:8080/v1", "http://[::1]:8080/v1", "http://10.0.0.1/v1"] {
            let e = empty.check(url).unwrap_err().to_string();
            assert!(e.contains("generate.allow_hosts"), "{e}");
        }
    }

    #[test]
    fn addresses_networks_and_names_each_match_their_own_kind() {
        let a = allow(&["127.0.0.1", "10.0.0.0/8", "fd00::/8", "GPU-Box.lan", "[::1]"]);
        assert_eq!(a.check("http://127.0.0.1:8081/v1").unwrap(), "127.0.0.1");
        assert!(a.check("http://10.200.3.4/v1").is_ok());
        assert!(a.check("https://[fd12::5]:443/v1").is_ok());
        assert!(a.check("http://[::1]:9000/v1").is_ok());
        assert!(a.check("http://gpu-box.LAN:8000/v1").is_ok());
        // Not named: another loopback address, a public address, a name that only ends like one.
        for url in ["http://127.0.0.2/v1", "http://8.8.8.8/v1", "http://evil-gpu-box.lan/v1", "http://gpu-box.lan.evil.com/v1", "http://11.0.0.1/v1"] {
            assert!(a.check(url).is_err(), "{url}");
        }
        // A name is never matched against a network by resolving it.
        assert!(a.check("http://localhost/v1").is_err());
    }

    #[test]
    fn malformed_entries_and_urls_are_configuration_errors() {
        for bad in ["http://10.0.0.1", "10.0.0.0/99", "", "gpu box", "10.0.0.1:8080"] {
            assert!(HostAllowlist::parse(&[bad.to_string()]).is_err(), "{bad}");
        }
        let a = allow(&["127.0.0.1"]);
        assert!(a.check("127.0.0.1:8080").is_err());
        assert!(a.check("ftp://127.0.0.1/").is_err());
    }
}
