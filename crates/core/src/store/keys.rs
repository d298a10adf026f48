//! API keys in the catalog: who may call the HTTP API, for which tenant, in which role.
//!
//! A key is `rbx_` + 64 hex digits (256 random bits), shown once when it is created; the catalog
//! keeps only its sha256. Presented keys are checked against every active key's hash in constant
//! time ([`subtle`]), so neither the comparison nor an index lookup says how close a guess was.
//! Owns the DDL of the `api_keys` table. May import `types` and `error` only.
//!
//! ```
//! use ragbox_core::store::{Catalog, KeyRole};
//! let dir = tempfile::tempdir()?;
//! let catalog = Catalog::open(&dir.path().join("catalog.sqlite"))?;
//! let (row, secret) = catalog.keys().create("alice", Some("acme"), KeyRole::Reader)?;
//! assert!(secret.starts_with("rbx_") && secret.len() == 68);
//! assert_eq!(catalog.keys().authenticate(&secret)?.map(|k| k.id), Some(row.id));
//! assert!(catalog.keys().authenticate("rbx_0000")?.is_none());
//! # Ok::<(), ragbox_core::Error>(())
//! ```

use serde::Serialize;
use subtle::ConstantTimeEq;

use super::now_ms;
use super::sql::{params, Database, Row, Scope};
use crate::error::{Error, Result};

/// The prefix every key starts with (so a leaked key is recognisable in logs and scanners).
pub const KEY_PREFIX: &str = "rbx_";

/// What a key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyRole {
    /// Search, ask, chat, feedback, list documents.
    Reader,
    /// A reader that may also upload, remove and re-ingest documents.
    Writer,
    /// Every tenant, every route, the audit log and the keys.
    Admin,
}

impl KeyRole {
    /// As stored.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyRole::Reader => "reader",
            KeyRole::Writer => "writer",
            KeyRole::Admin => "admin",
        }
    }
}

impl std::fmt::Display for KeyRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for KeyRole {
    type Err = Error;

    fn from_str(s: &str) -> Result<KeyRole> {
        match s.trim().to_ascii_lowercase().as_str() {
            "reader" => Ok(KeyRole::Reader),
            "writer" => Ok(KeyRole::Writer),
            "admin" => Ok(KeyRole::Admin),
            _ => Err(Error::Invalid(format!("role `{s}`: use reader, writer or admin"))),
        }
    }
}

/// A key as the catalog holds it (never the secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyRow {
    /// Key id.
    pub id: i64,
    /// Who or what it was made for.
    pub name: String,
    /// The tenant it reaches; `None` for an admin key, which reaches all.
    pub tenant: Option<String>,
    /// What it may do.
    pub role: KeyRole,
    /// When it was made, ms since the epoch.
    pub created_ms: i64,
    /// When it was revoked, if it was.
    pub revoked_ms: Option<i64>,
    /// The groups whose documents it reads besides the open ones; empty: every document of
    /// its tenant (a key made without groups).
    pub groups: Vec<String>,
}

/// Hex sha256 of a key's text.
fn key_hash(secret: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(secret.as_bytes()))
}

fn key_from_row(r: &Row) -> Result<KeyRow> {
    Ok(KeyRow {
        id: r.int(0)?,
        name: r.text(1)?,
        tenant: r.opt_text(2)?,
        role: r.text(3)?.parse()?,
        created_ms: r.int(4)?,
        revoked_ms: r.opt_int(5)?,
        groups: crate::access::decode(&r.text(6)?),
    })
}

const KEY_COLUMNS: &str = "k.id, k.name, k.tenant, k.role, k.created_ms, k.revoked_ms, COALESCE(g.groups, '')";
const KEY_TABLES: &str = "api_keys k LEFT JOIN key_groups g ON g.key_id = k.id";

/// The API keys of a catalog ([`super::Catalog::keys`]).
pub struct Keys<'c> {
    db: &'c Database,
}

impl<'c> Keys<'c> {
    pub(super) fn new(db: &'c Database) -> Keys<'c> {
        Keys { db }
    }

    /// Makes a key for `tenant` (`None` only for an admin key: all tenants). Returns its row and
    /// the secret, which is not stored and cannot be shown again.
    pub fn create(&self, name: &str, tenant: Option<&str>, role: KeyRole) -> Result<(KeyRow, String)> {
        self.create_for_groups(name, tenant, role, &[])
    }

    /// [`Keys::create`] for a key that reads only the open documents and those of `groups`
    /// (none: every document of its tenant).
    pub fn create_for_groups(&self, name: &str, tenant: Option<&str>, role: KeyRole, groups: &[String]) -> Result<(KeyRow, String)> {
        let groups = crate::access::normalise(groups.iter().cloned());
        if tenant.is_none() && role != KeyRole::Admin {
            return Err(Error::Invalid(format!("a {role} key needs --tenant; only admin keys reach every tenant")));
        }
        if let Some(t) = tenant {
            super::layout::check_tenant_name(t)?;
        }
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|e| Error::Io(std::io::Error::other(format!("no randomness for a key: {e}"))))?;
        let secret = format!("{KEY_PREFIX}{}", hex::encode(bytes));
        let row = self.db.write(Scope::All, |sql| {
            let id = sql
                .query_one(
                    "INSERT INTO api_keys (name, tenant, role, sha256, created_ms) VALUES (?1, ?2, ?3, ?4, ?5) RETURNING id",
                    params![name, tenant, role.as_str(), key_hash(&secret), now_ms()],
                )?
                .int(0)?;
            if !groups.is_empty() {
                sql.execute("INSERT INTO key_groups (key_id, groups) VALUES (?1, ?2)", params![id, crate::access::encode(&groups)])?;
            }
            key_from_row(&sql.query_one(&format!("SELECT {KEY_COLUMNS} FROM {KEY_TABLES} WHERE k.id = ?1"), params![id])?)
        })?;
        Ok((row, secret))
    }

    /// Every key, active and revoked, oldest first.
    pub fn list(&self) -> Result<Vec<KeyRow>> {
        self.db.read(Scope::All, |sql| sql.query(&format!("SELECT {KEY_COLUMNS} FROM {KEY_TABLES} ORDER BY k.id"), &[])?.iter().map(key_from_row).collect())
    }

    /// Revokes key `id`; returns it. An unknown id is a user error; revoking twice keeps the
    /// first time.
    pub fn revoke(&self, id: i64) -> Result<KeyRow> {
        self.db
            .write(Scope::All, |sql| {
                sql.execute("UPDATE api_keys SET revoked_ms = COALESCE(revoked_ms, ?2) WHERE id = ?1", params![id, now_ms()])?;
                sql.query_opt(&format!("SELECT {KEY_COLUMNS} FROM {KEY_TABLES} WHERE k.id = ?1"), params![id])?.as_ref().map(key_from_row).transpose()
            })?
            .ok_or_else(|| Error::Invalid(format!("no key {id}; `ragbox keys list` shows them")))
    }

    /// The active key whose secret is `presented`, if any. Compares the presented key's hash with
    /// every active key's hash in constant time, without stopping at a match.
    pub fn authenticate(&self, presented: &str) -> Result<Option<KeyRow>> {
        let hash = key_hash(presented);
        let rows = self.db.read(Scope::All, |sql| sql.query(&format!("SELECT {KEY_COLUMNS}, k.sha256 FROM {KEY_TABLES} WHERE k.revoked_ms IS NULL"), &[]))?;
        let mut found = None;
        for r in rows {
            let (row, stored) = (key_from_row(&r)?, r.text(7)?);
            if bool::from(stored.as_bytes().ct_eq(hash.as_bytes())) {
                found = Some(row);
            }
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Catalog;

    #[test]
    fn keys_are_hashed_scoped_and_revocable() {
        let dir = tempfile::tempdir().unwrap();
        let cat = Catalog::open(&dir.path().join("c.sqlite")).unwrap();
        let (a, secret_a) = cat.keys().create("alice", Some("acme"), KeyRole::Reader).unwrap();
        let (b, secret_b) = cat.keys().create("root", None, KeyRole::Admin).unwrap();
        assert_ne!(secret_a, secret_b);
        assert_eq!(secret_a.len(), 4 + 64);
        assert!(cat.keys().create("bob", None, KeyRole::Writer).is_err(), "a writer needs a tenant");
        assert!(cat.keys().create("bob", Some("../x"), KeyRole::Writer).is_err());
        // Only the hash is stored.
        let conn = cat.conn();
        let stored: String = conn.query_row("SELECT sha256 FROM api_keys WHERE id = ?1", [a.id], |r| r.get(0)).unwrap();
        drop(conn);
        assert_ne!(stored, secret_a);
        assert_eq!(stored, key_hash(&secret_a));
        assert_eq!(cat.keys().authenticate(&secret_a).unwrap().unwrap().tenant.as_deref(), Some("acme"));
        assert_eq!(cat.keys().authenticate(&secret_b).unwrap().unwrap().role, KeyRole::Admin);
        assert!(cat.keys().authenticate(&secret_a[..60]).unwrap().is_none());
        let revoked = cat.keys().revoke(a.id).unwrap();
        assert!(revoked.revoked_ms.is_some());
        assert!(cat.keys().authenticate(&secret_a).unwrap().is_none(), "a revoked key is refused");
        assert!(cat.keys().revoke(999).is_err());
        assert_eq!(cat.keys().list().unwrap().len(), 2);
        assert_eq!(b.role, KeyRole::Admin);
    }
}
