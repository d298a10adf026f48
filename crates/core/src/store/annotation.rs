//! The annotation cache: notes the `llm` annotator wrote, keyed by the sha256 of
//! (annotator, whole document, chunk text), so no chunk is ever annotated twice — not on a
//! re-run, not after an edit elsewhere in another document, not in another tenant.

use std::collections::HashMap;

use rusqlite::{params, OptionalExtension};

use super::connection::Shared;
use crate::error::Result;
use crate::types::TextHash;

/// The annotation cache of a catalog ([`super::Catalog::annotations`]).
pub struct Annotations<'c> {
    conn: &'c Shared,
}

impl<'c> Annotations<'c> {
    pub(super) fn new(conn: &'c Shared) -> Annotations<'c> {
        Annotations { conn }
    }

    /// The cached contexts for those of `keys` that have one.
    pub fn cached(&self, keys: &[TextHash]) -> Result<HashMap<TextHash, String>> {
        let conn = self.conn.lock();
        let mut st = conn.prepare_cached("SELECT context FROM annotations WHERE key = ?1")?;
        let mut out = HashMap::new();
        for k in keys {
            if let Some(c) = st.query_row([&k[..]], |r| r.get::<_, String>(0)).optional()? {
                out.insert(*k, c);
            }
        }
        Ok(out)
    }

    /// Caches notes written by `annotator` (existing entries are kept).
    pub fn put(&self, annotator: &str, rows: &[(TextHash, String)]) -> Result<()> {
        let mut conn = self.conn.lock();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        {
            let mut put =
                tx.prepare_cached("INSERT OR IGNORE INTO annotations (key, contextualizer, context) VALUES (?1, ?2, ?3)")?;
            for (k, c) in rows {
                put.execute(params![&k[..], annotator, c])?;
            }
        }
        tx.commit()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::store::Catalog;

    #[test]
    fn annotations_round_trip_and_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.sqlite");
        let c = Catalog::open(&path).unwrap();
        let (a, b) = ([1u8; 32], [2u8; 32]);
        assert!(c.annotations().cached(&[a, b]).unwrap().is_empty());
        c.annotations().put("llm-context-v1:x", &[(a, "From the travel policy.".into())]).unwrap();
        c.annotations().put("llm-context-v1:x", &[(a, "ignored: first write wins".into())]).unwrap();
        drop(c);
        let c = Catalog::open(&path).unwrap();
        let got = c.annotations().cached(&[a, b]).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[&a], "From the travel policy.");
    }
}
