//! What the catalog keeps of conversations, and for how long: retention runs and legal holds.
//!
//! A retention run deletes a tenant's answers (the answer log), chat turns, empty sessions and
//! feedback older than a cutoff, and blanks what the audit chain holds of them (the question,
//! chunks and detail of the rows of [`REDACTABLE`] actions; see `events`), then appends one
//! `retention` row that names the blanked rows, all in one write transaction. The chain's
//! hashes stay, so `audit verify` still holds. A legal hold (a tenant's, or a person's in a
//! tenant) keeps the rows it covers out of every run until it is released. [`Retention::reclaim`]
//! then gives the freed space back to the file system: SQLite is vacuumed and its write-ahead
//! log emptied; PostgreSQL's tables are rewritten (`VACUUM FULL`), so the deleted text is in no
//! table file afterwards.
//!
//! A person is named as the service names a caller (`person:ISSUER|SUBJECT`, `key:ID`) or by the
//! subject alone; audit rows are matched by their `who` (see [`super::events::is_person`]).
//!
//! Reads and writes `answers`, `turns`, `feedback`, `sessions`, `session_owners`, `events` and
//! `legal_holds` (their DDL is in `store::schema`). May import `types` and `error` only.
//!
//! ```
//! use ragbox_core::store::{Catalog, Retention};
//! let dir = tempfile::tempdir()?;
//! let catalog = Catalog::open(&dir.path().join("catalog.sqlite"))?;
//! let tenant = catalog.create_tenant("acme", "fake", 16)?;
//! let hold = catalog.retention().place_hold("acme", Some("alice"), "the Zander matter")?;
//! let acme = ragbox_core::store::retention::Tenant { id: tenant.id, name: &tenant.name };
//! let report = catalog.retention().run(acme, 30, ragbox_core::store::now_ms(), false, (None, "cli"))?;
//! assert_eq!(report.held_people, ["alice"]);
//! assert_eq!(catalog.retention().release_hold(hold.id)?.id, hold.id);
//! # Ok::<(), ragbox_core::Error>(())
//! ```

use std::collections::HashSet;

use serde::Serialize;

use super::now_ms;
use super::events::{acted, append_in, id_runs, is_person, redact_in, EventRecord, REDACTABLE, RETENTION_ACTION};
use super::sql::{params, Database, Row, Scope, Sql};
use crate::error::{Error, Result};

const DAY_MS: i64 = 24 * 60 * 60 * 1000;

/// The `meta` key set by a run that deleted rows and cleared by [`Retention::reclaim`] once the
/// files no longer hold them.
const RECLAIM_PENDING: &str = "retention_reclaim_pending";

/// A legal hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Hold {
    /// Row id (what `ragbox retention release` takes).
    pub id: i64,
    /// The tenant it holds.
    pub tenant: String,
    /// The person it holds in that tenant; empty for the whole tenant.
    pub person: String,
    /// Why (a matter, a request), as the person who placed it wrote it.
    pub reason: String,
    /// When it was placed, ms since the epoch.
    pub placed_ms: i64,
    /// When it was released; `None` while it holds.
    pub released_ms: Option<i64>,
}

impl Hold {
    /// Whether it holds (has not been released).
    pub fn active(&self) -> bool {
        self.released_ms.is_none()
    }
}

fn hold_from_row(r: &Row) -> Result<Hold> {
    Ok(Hold { id: r.int(0)?, tenant: r.text(1)?, person: r.text(2)?, reason: r.text(3)?, placed_ms: r.int(4)?, released_ms: r.opt_int(5)? })
}

const HOLD_COLUMNS: &str = "id, tenant, person, reason, placed_ms, released_ms";

/// A tenant as a run names it: its row id and its name (the audit rows carry the name).
#[derive(Debug, Clone, Copy)]
pub struct Tenant<'a> {
    /// Row id.
    pub id: i64,
    /// Name.
    pub name: &'a str,
}

/// What a retention run deleted (or, dry, would delete) of one tenant.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RetentionReport {
    /// The tenant.
    pub tenant: String,
    /// Conversations older than this many days go.
    pub keep_days: u32,
    /// The cutoff, ms since the epoch: rows written before it go.
    pub cutoff_ms: i64,
    /// Nothing was deleted because the whole tenant is on hold.
    pub tenant_held: bool,
    /// The people whose rows a hold kept.
    pub held_people: Vec<String>,
    /// Answers deleted from the answer log.
    pub answers: usize,
    /// Chat turns deleted.
    pub turns: usize,
    /// Feedback rows deleted.
    pub feedback: usize,
    /// Sessions deleted (those left with no turns and no answers).
    pub sessions: usize,
    /// Audit rows blanked.
    pub events_blanked: usize,
    /// Rows past the cutoff that a hold kept.
    pub kept_for_holds: usize,
    /// The audit row that records the run (`None`: nothing was deleted, or a dry run).
    pub event_id: Option<i64>,
    /// Nothing was changed: this is what a run would delete.
    pub dry_run: bool,
}

impl RetentionReport {
    /// Rows deleted or blanked.
    pub fn rows(&self) -> usize {
        self.answers + self.turns + self.feedback + self.sessions + self.events_blanked
    }
}

/// What [`Retention::reclaim`] did to the database's files.
#[derive(Debug, Clone, Serialize)]
pub struct Reclaimed {
    /// `vacuum` (SQLite) or `vacuum full` (PostgreSQL: the conversation tables and the audit log).
    pub how: String,
    /// The catalog file's bytes before and after (SQLite only).
    pub bytes_before: Option<u64>,
    /// After.
    pub bytes_after: Option<u64>,
    /// SQLite's write-ahead log could not be emptied (another process was reading); the deleted
    /// text may stay in it until the next checkpoint.
    pub wal_kept: bool,
}

/// The id list of a `WHERE id IN (...)`.
fn id_list(ids: &[i64]) -> String {
    ids.iter().map(i64::to_string).collect::<Vec<_>>().join(", ")
}

/// Deletes rows of `table` by id, in batches.
fn delete_ids(sql: &mut dyn Sql, table: &str, column: &str, ids: &[i64]) -> Result<usize> {
    let mut n = 0u64;
    for batch in ids.chunks(500) {
        n += sql.execute(&format!("DELETE FROM {table} WHERE {column} IN ({})", id_list(batch)), &[])?;
    }
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}

/// The retention runs and legal holds of a catalog ([`super::Catalog::retention`]).
pub struct Retention<'c> {
    db: &'c Database,
}

impl<'c> Retention<'c> {
    pub(super) fn new(db: &'c Database) -> Retention<'c> {
        Retention { db }
    }

    /// Places a hold on `tenant` (or on `person` in it); returns it.
    pub fn place_hold(&self, tenant: &str, person: Option<&str>, reason: &str) -> Result<Hold> {
        if reason.trim().is_empty() {
            return Err(Error::Invalid("a legal hold needs a reason (--reason \"the matter or request\")".into()));
        }
        let person = person.unwrap_or("").trim();
        self.db.write(Scope::All, |sql| {
            let known = sql.query_one("SELECT EXISTS (SELECT 1 FROM tenants WHERE name = ?1)", params![tenant])?.flag(0)?;
            if !known {
                return Err(Error::UnknownTenant { name: tenant.to_string(), known: Vec::new() });
            }
            let row = sql.query_one(
                &format!("INSERT INTO legal_holds (tenant, person, reason, placed_ms) VALUES (?1, ?2, ?3, ?4) RETURNING {HOLD_COLUMNS}"),
                params![tenant, person, reason.trim(), now_ms()],
            )?;
            hold_from_row(&row)
        })
    }

    /// Releases hold `id`; returns it. An unknown or already released hold is a user error.
    pub fn release_hold(&self, id: i64) -> Result<Hold> {
        self.db.write(Scope::All, |sql| {
            let row = sql.query_opt(
                &format!("UPDATE legal_holds SET released_ms = ?1 WHERE id = ?2 AND released_ms IS NULL RETURNING {HOLD_COLUMNS}"),
                params![now_ms(), id],
            )?;
            match row {
                Some(r) => hold_from_row(&r),
                None => Err(Error::Invalid(format!("no hold {id} in place; `ragbox retention status` lists the holds"))),
            }
        })
    }

    /// The holds of `tenant` (every tenant's when `None`), oldest first, released ones too.
    pub fn holds(&self, tenant: Option<&str>) -> Result<Vec<Hold>> {
        self.db.read(Scope::All, |sql| {
            sql.query(
                &format!("SELECT {HOLD_COLUMNS} FROM legal_holds WHERE CAST(?1 AS TEXT) IS NULL OR tenant = ?1 ORDER BY id"),
                params![tenant],
            )?
            .iter()
            .map(hold_from_row)
            .collect()
        })
    }

    /// The names rows of `person` may carry: the name itself, and `key:ID` for each key so named
    /// (answers and sessions record a key's caller by its id).
    pub fn person_names(&self, person: &str) -> Result<Vec<String>> {
        let mut names = vec![person.to_string()];
        let keys = self.db.read(Scope::All, |sql| sql.query("SELECT id FROM api_keys WHERE name = ?1 ORDER BY id", params![person]))?;
        for k in keys {
            names.push(format!("key:{}", k.int(0)?));
        }
        Ok(names)
    }

    /// Deletes the conversations of `tenant` older than `keep_days` before `now_ms` (0 days: all of
    /// them), except what a hold keeps, and blanks their audit rows; `dry` reports what would go
    /// and changes nothing. The run is recorded in the audit chain as done by `by` (key id and
    /// name) when it deleted anything. Run [`Retention::reclaim`] after to free the space.
    pub fn run(&self, tenant: Tenant<'_>, keep_days: u32, now_ms: i64, dry: bool, by: (Option<i64>, &str)) -> Result<RetentionReport> {
        let cutoff_ms = now_ms.saturating_sub(i64::from(keep_days) * DAY_MS);
        let holds: Vec<Hold> = self.holds(Some(tenant.name))?.into_iter().filter(Hold::active).collect();
        let mut report = RetentionReport { tenant: tenant.name.to_string(), keep_days, cutoff_ms, dry_run: dry, ..RetentionReport::default() };
        report.tenant_held = holds.iter().any(|h| h.person.is_empty());
        report.held_people = holds.iter().filter(|h| !h.person.is_empty()).map(|h| h.person.clone()).collect();
        report.held_people.sort();
        report.held_people.dedup();
        if report.tenant_held {
            return Ok(report);
        }
        let mut people = Vec::new();
        for p in &report.held_people {
            people.extend(self.person_names(p)?);
        }
        let held = |identity: &str| people.iter().any(|p| is_person(identity, p));
        let body = |sql: &mut dyn Sql| -> Result<RetentionReport> {
            let mut report = report.clone();
            let mut kept = 0;
            // Answers, by the person who asked or the session's owner.
            let mut answers = Vec::new();
            for r in sql.query(
                "SELECT a.id, a.asker, COALESCE(o.owner, '') FROM answers a LEFT JOIN session_owners o ON o.session_id = a.session_id
                 WHERE a.tenant_id = ?1 AND a.created_ms < ?2",
                params![tenant.id, cutoff_ms],
            )? {
                if held(&r.text(1)?) || held(&r.text(2)?) {
                    kept += 1;
                } else {
                    answers.push(r.int(0)?);
                }
            }
            let answer_set: HashSet<i64> = answers.iter().copied().collect();
            // Turns, by their session's owner; a turn of a deleted answer goes with it.
            let mut turns = Vec::new();
            for r in sql.query(
                "SELECT t.id, COALESCE(o.owner, ''), t.answer_id, t.created_ms < ?2 FROM turns t JOIN sessions s ON s.id = t.session_id
                 LEFT JOIN session_owners o ON o.session_id = t.session_id WHERE s.tenant_id = ?1",
                params![tenant.id, cutoff_ms],
            )? {
                let of_deleted = r.opt_int(2)?.is_some_and(|a| answer_set.contains(&a));
                let old = r.flag(3)?;
                if of_deleted || (old && !held(&r.text(1)?)) {
                    turns.push(r.int(0)?);
                } else if old {
                    kept += 1;
                }
            }
            let mut feedback = 0;
            for batch in answers.chunks(500) {
                feedback += sql.query_one(&format!("SELECT COUNT(*) FROM feedback WHERE answer_id IN ({})", id_list(batch)), &[])?.int(0)? as usize;
            }
            // Audit rows of what people asked and read.
            let actions = REDACTABLE.iter().map(|a| format!("'{a}'")).collect::<Vec<_>>().join(", ");
            let mut events = Vec::new();
            for r in sql.query(
                &format!(
                    "SELECT id, key_id, key_name, detail FROM events
                     WHERE tenant = ?1 AND time_ms < ?2 AND redacted_ms IS NULL AND action IN ({actions}) ORDER BY id"
                ),
                params![tenant.name, cutoff_ms],
            )? {
                let detail: serde_json::Value = serde_json::from_str(&r.text(3)?).unwrap_or_default();
                let (key_id, key_name) = (r.opt_int(1)?, r.text(2)?);
                if people.iter().any(|p| acted(key_id, &key_name, &detail, p)) {
                    kept += 1;
                } else {
                    events.push(r.int(0)?);
                }
            }
            report.kept_for_holds = kept;
            report.answers = answers.len();
            report.turns = turns.len();
            report.feedback = feedback;
            report.events_blanked = events.len();
            if !dry {
                delete_ids(sql, "feedback", "answer_id", &answers)?;
                delete_ids(sql, "turns", "id", &turns)?;
                delete_ids(sql, "answers", "id", &answers)?;
                redact_in(sql, &events, now_ms)?;
            }
            // Sessions left with nothing in them: after the deletions above, those with no turn
            // and no answer; in a dry run, those with none since the cutoff.
            let since = if dry { "AND created_ms >= ?2" } else { "" };
            let mut sessions = Vec::new();
            for r in sql.query(
                &format!(
                    "SELECT s.id, COALESCE(o.owner, '') FROM sessions s LEFT JOIN session_owners o ON o.session_id = s.id
                     WHERE s.tenant_id = ?1 AND s.created_ms < ?2
                       AND NOT EXISTS (SELECT 1 FROM turns WHERE session_id = s.id {since})
                       AND NOT EXISTS (SELECT 1 FROM answers WHERE session_id = s.id {since})"
                ),
                params![tenant.id, cutoff_ms],
            )? {
                if !held(&r.text(1)?) {
                    sessions.push(r.int(0)?);
                }
            }
            report.sessions = sessions.len();
            if dry || report.rows() == 0 {
                return Ok(report);
            }
            delete_ids(sql, "session_owners", "session_id", &sessions)?;
            delete_ids(sql, "sessions", "id", &sessions)?;
            // Until `reclaim` has run, the deleted text may sit in free pages: a run that stops
            // here leaves the mark for the next to finish.
            sql.execute(
                &format!("INSERT INTO meta (key, value) VALUES ('{RECLAIM_PENDING}', '1') ON CONFLICT (key) DO UPDATE SET value = excluded.value"),
                &[],
            )?;
            let detail = serde_json::json!({
                "keep_days": keep_days,
                "cutoff_ms": cutoff_ms,
                "deleted": { "answers": report.answers, "turns": report.turns, "feedback": report.feedback, "sessions": report.sessions },
                "redacted": id_runs(&events),
                "kept_for_holds": kept,
            });
            report.event_id = Some(append_in(
                sql,
                &EventRecord { key_id: by.0, key_name: by.1, tenant: tenant.name, action: RETENTION_ACTION, detail: &detail, ..EventRecord::default() },
            )?);
            Ok(report)
        };
        if dry {
            self.db.read(Scope::All, body)
        } else {
            self.db.write(Scope::All, body)
        }
    }

    /// Whether a run deleted rows whose space [`Retention::reclaim`] has not freed yet (it
    /// stopped before, or another process kept SQLite's log).
    pub fn reclaim_pending(&self) -> Result<bool> {
        self.db.read(Scope::All, |sql| {
            Ok(sql.query_opt(&format!("SELECT value FROM meta WHERE key = '{RECLAIM_PENDING}'"), &[])?.is_some())
        })
    }

    fn reclaimed(&self) -> Result<()> {
        self.db.write(Scope::All, |sql| sql.execute(&format!("DELETE FROM meta WHERE key = '{RECLAIM_PENDING}'"), &[]).map(|_| ()))
    }

    /// Frees the space deleted rows held, so that their text is in no database file: SQLite
    /// is vacuumed (the file rewritten) and its write-ahead log checkpointed and truncated;
    /// PostgreSQL rewrites the conversation tables and the audit log (`VACUUM FULL`, which locks
    /// each table while it is copied).
    pub fn reclaim(&self) -> Result<Reclaimed> {
        match self.db {
            Database::Sqlite(_) => {
                let conn = self.db.sqlite().expect("a SQLite database");
                let path = conn.path().map(std::path::PathBuf::from);
                let size = || path.as_ref().and_then(|p| std::fs::metadata(p).ok()).map(|m| m.len());
                let before = size();
                conn.execute_batch("VACUUM")?;
                // (busy, frames in the log, frames checkpointed): busy means a reader kept it.
                let (busy, log, done): (i64, i64, i64) = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
                let wal_kept = busy != 0 || done < log;
                drop(conn);
                // The mark goes once the file and its log hold none of the deleted rows.
                if !wal_kept {
                    self.reclaimed()?;
                }
                Ok(Reclaimed { how: "vacuum".into(), bytes_before: before, bytes_after: size(), wal_kept })
            }
            Database::Postgres(pg) => {
                pg.with("vacuuming the catalog", |c| c.batch_execute("VACUUM FULL answers, turns, feedback, sessions, session_owners, events"))?;
                self.reclaimed()?;
                Ok(Reclaimed { how: "vacuum full".into(), bytes_before: None, bytes_after: None, wal_kept: false })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_retention_contract_holds_on_sqlite_and_nothing_deleted_stays_in_its_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.sqlite");
        let cat = crate::store::Catalog::open(&path).unwrap();
        let raw = || {
            let mut bytes = Vec::new();
            for suffix in ["", "-wal", "-journal"] {
                bytes.extend(std::fs::read(format!("{}{suffix}", path.display())).unwrap_or_default());
            }
            bytes
        };
        crate::store::contract::retention(&cat, &raw);
    }
}
