//! Quotas counted in the catalog: one row per counted request (who, what, when), so that every
//! process and every node over one catalog counts a person's requests once, in one rolling
//! window. A take runs in one write transaction (on PostgreSQL under an advisory lock), so two
//! nodes cannot both let the last request of a window through. Rows older than a day, the
//! longest window, are pruned by every take.
//!
//! Reads and writes `quota_uses` (its DDL is in `store::schema`). May import `types` and `error`
//! only.
//!
//! ```
//! use ragbox_core::store::Catalog;
//! let dir = tempfile::tempdir()?;
//! let catalog = Catalog::open(&dir.path().join("catalog.sqlite"))?;
//! let q = catalog.quotas();
//! assert_eq!(q.take("key:7", "question", 1, 60_000, 1_000)?, Ok(()));
//! assert_eq!(q.take("key:7", "question", 1, 60_000, 21_000)?, Err(40), "40 s until the first is a minute old");
//! # Ok::<(), ragbox_core::Error>(())
//! ```

use super::sql::{params, Database, Dialect, Scope};
use crate::error::Result;

/// The advisory lock key takes hold on PostgreSQL.
const QUOTA_LOCK: i64 = 0x7261_6762_6f78_0003;

/// The longest window counted (uploads per day): older rows count for nothing.
const LONGEST_WINDOW_MS: i64 = 24 * 60 * 60 * 1000;

/// The quota counters of a catalog ([`super::Catalog::quotas`]).
pub struct Quotas<'c> {
    db: &'c Database,
}

impl<'c> Quotas<'c> {
    pub(super) fn new(db: &'c Database) -> Quotas<'c> {
        Quotas { db }
    }

    /// Counts one `what` by `who` at `now_ms` against `limit` per `window_ms`: `Ok(())` within
    /// the limit (counted), else the whole seconds until the oldest counted one leaves the window
    /// (the refused one is not counted).
    pub fn take(&self, who: &str, what: &str, limit: u32, window_ms: i64, now_ms: i64) -> Result<std::result::Result<(), u64>> {
        self.db.write(Scope::All, |sql| {
            if sql.dialect() == Dialect::Postgres {
                sql.query("SELECT pg_advisory_xact_lock(?1)", params![QUOTA_LOCK])?;
            }
            sql.execute("DELETE FROM quota_uses WHERE at_ms <= ?1", params![now_ms - LONGEST_WINDOW_MS.max(window_ms)])?;
            let r = sql.query_one(
                "SELECT COUNT(*), MIN(at_ms) FROM quota_uses WHERE who = ?1 AND what = ?2 AND at_ms > ?3",
                params![who, what, now_ms - window_ms],
            )?;
            let (used, oldest) = (r.int(0)?, r.opt_int(1)?);
            if used >= i64::from(limit) {
                let wait_ms = oldest.unwrap_or(now_ms) + window_ms - now_ms;
                return Ok(Err(u64::try_from(wait_ms / 1000).unwrap_or(0).max(1)));
            }
            sql.execute("INSERT INTO quota_uses (who, what, at_ms) VALUES (?1, ?2, ?3)", params![who, what, now_ms])?;
            Ok(Ok(()))
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::store::Catalog;

    #[test]
    fn the_window_rolls_and_each_caller_and_kind_counts_alone() {
        let dir = tempfile::tempdir().unwrap();
        let cat = Catalog::open(&dir.path().join("c.sqlite")).unwrap();
        let q = cat.quotas();
        let t0 = 1_000_000;
        assert_eq!(q.take("a", "question", 2, 60_000, t0).unwrap(), Ok(()));
        assert_eq!(q.take("a", "question", 2, 60_000, t0 + 10_000).unwrap(), Ok(()));
        assert_eq!(q.take("a", "question", 2, 60_000, t0 + 20_000).unwrap(), Err(40), "until the oldest is a minute old");
        assert_eq!(q.take("b", "question", 2, 60_000, t0 + 20_000).unwrap(), Ok(()), "another caller counts alone");
        assert_eq!(q.take("a", "upload", 1, 86_400_000, t0 + 20_000).unwrap(), Ok(()), "another kind counts alone");
        assert_eq!(q.take("a", "question", 2, 60_000, t0 + 61_000).unwrap(), Ok(()), "the window rolled");
        // A second connection to the same file (another process) sees the same counts.
        let other = Catalog::open(&dir.path().join("c.sqlite")).unwrap();
        assert_eq!(other.quotas().take("a", "question", 2, 60_000, t0 + 62_000).unwrap(), Err(8));
    }
}
