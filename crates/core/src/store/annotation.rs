//! The annotation cache: notes the `llm` annotator wrote, keyed by the sha256 of
//! (annotator, whole document, chunk text), so no chunk is ever annotated twice — not on a
//! re-run, not after an edit elsewhere in another document, not in another tenant.

use std::collections::HashMap;

use super::sql::{params, Database, Scope};
use crate::error::Result;
use crate::types::TextHash;

/// The annotation cache of a catalog ([`super::Catalog::annotations`]).
pub struct Annotations<'c> {
    db: &'c Database,
}

impl<'c> Annotations<'c> {
    pub(super) fn new(db: &'c Database) -> Annotations<'c> {
        Annotations { db }
    }

    /// The cached contexts for those of `keys` that have one.
    pub fn cached(&self, keys: &[TextHash]) -> Result<HashMap<TextHash, String>> {
        self.db.read(Scope::All, |sql| {
            let mut out = HashMap::new();
            for k in keys {
                if let Some(r) = sql.query_opt("SELECT context FROM annotations WHERE key = ?1", params![&k[..]])? {
                    out.insert(*k, r.text(0)?);
                }
            }
            Ok(out)
        })
    }

    /// Caches notes written by `annotator` (existing entries are kept).
    pub fn put(&self, annotator: &str, rows: &[(TextHash, String)]) -> Result<()> {
        let mut sorted: Vec<&(TextHash, String)> = rows.iter().collect();
        // In key order, for the reason `Catalog`'s embedding cache gives.
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        self.db.write(Scope::All, |sql| {
            for (k, c) in &sorted {
                sql.execute("INSERT INTO annotations (key, contextualizer, context) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING", params![&k[..], annotator, c])?;
            }
            Ok(())
        })
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
