//! The audit trail: one append-only, hash-chained row per action (search, answer, chat turn,
//! upload, removal, key change, failed authentication).
//!
//! Each row stores the sha256 of the previous row's hash followed by its own fields, so changing,
//! inserting or removing a row breaks the chain from that row on, and [`Audit::verify`]
//! names the first row that no longer fits. Triggers refuse `UPDATE` and `DELETE` on the table (SQLite's
//! and PostgreSQL's alike), so tampering needs someone who edits the database by hand (and the
//! chain shows it). Rows are appended under the catalog's write lock (SQLite: an IMMEDIATE
//! transaction; PostgreSQL: an advisory lock for the transaction), so two processes or two
//! nodes cannot fork the chain. Owns the DDL of the `events` table. May import `types` and `error` only.
//!
//! **Retention.** A retention run (`store::retention`) may blank what a person asked or read in
//! a row ([`REDACTABLE`] actions): the question, the chunks and the detail become empty and
//! `redacted_ms` is stamped, while the row's id, time, action, outcome and both hashes stay. In
//! the same transaction it appends a `retention` row naming the rows it blanked. [`Audit::verify`]
//! checks a blanked row by its place in the chain (the next row names its hash) instead of its
//! fields, and names any blanked row that no later `retention` row accounts for.
//!
//! ```
//! use ragbox_core::store::{Catalog, EventRecord};
//! let dir = tempfile::tempdir()?;
//! let catalog = Catalog::open(&dir.path().join("catalog.sqlite"))?;
//! catalog.audit().append(&EventRecord { action: "search", tenant: "acme", question: "travel", ..EventRecord::default() })?;
//! catalog.audit().append(&EventRecord { action: "auth_failed", outcome: "denied", ..EventRecord::default() })?;
//! let report = catalog.audit().verify()?;
//! assert_eq!(report.rows, 2);
//! assert!(report.broken.is_none());
//! # Ok::<(), ragbox_core::Error>(())
//! ```

use serde::Serialize;

use super::now_ms;
use super::sql::{params, Database, Dialect, Row, Scope, Sql};
use crate::error::{Error, Result};
use crate::types::ChunkId;

/// The actions whose rows say what a person asked or read, which a retention run blanks.
pub const REDACTABLE: [&str; 10] = [
    "search", "ask", "chat", "chat_completion", "feedback", "session_create", "read_passage", "read_document", "quota_exceeded", "export",
];

/// The action of the row a retention run appends; its detail's `redacted` lists the blanked rows'
/// ids as inclusive `[first, last]` runs.
pub const RETENTION_ACTION: &str = "retention";

/// The hash the first row chains from.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// One action to record.
#[derive(Debug, Clone, Copy)]
pub struct EventRecord<'a> {
    /// The key that acted (`None`: the local command line, or no valid key).
    pub key_id: Option<i64>,
    /// Its name (`cli` for the command line, empty for a failed authentication).
    pub key_name: &'a str,
    /// The tenant acted on (empty when none).
    pub tenant: &'a str,
    /// `search`, `ask`, `chat`, `feedback`, `upload`, `remove`, `reingest`, `key_create`,
    /// `key_revoke`, `auth_failed`, ...
    pub action: &'a str,
    /// The question or query, when there is one.
    pub question: &'a str,
    /// The chunks served.
    pub chunk_ids: &'a [ChunkId],
    /// The generator, when one was called.
    pub model: &'a str,
    /// `ok`, `refused`, `denied`, `cancelled`, `error: ...`.
    pub outcome: &'a str,
    /// Anything else (answer id, document, client address), as a JSON object.
    pub detail: &'a serde_json::Value,
}

static EMPTY_DETAIL: serde_json::Value = serde_json::Value::Null;

impl Default for EventRecord<'_> {
    fn default() -> Self {
        EventRecord {
            key_id: None,
            key_name: "",
            tenant: "",
            action: "",
            question: "",
            chunk_ids: &[],
            model: "",
            outcome: "ok",
            detail: &EMPTY_DETAIL,
        }
    }
}

/// A recorded row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventRow {
    /// Row id (its place in the chain).
    pub id: i64,
    /// When, ms since the epoch.
    pub time_ms: i64,
    /// The key that acted.
    pub key_id: Option<i64>,
    /// Its name.
    pub key_name: String,
    /// Tenant.
    pub tenant: String,
    /// What was done.
    pub action: String,
    /// The question or query.
    pub question: String,
    /// The chunks served.
    pub chunk_ids: Vec<ChunkId>,
    /// The generator.
    pub model: String,
    /// How it ended.
    pub outcome: String,
    /// Anything else.
    pub detail: serde_json::Value,
    /// The previous row's hash.
    pub prev_hash: String,
    /// This row's hash.
    pub hash: String,
    /// When a retention run blanked its question, chunks and detail (`None`: never).
    pub redacted_ms: Option<i64>,
}

/// Which rows to list.
#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    /// Only this tenant's rows.
    pub tenant: Option<String>,
    /// Only rows at or after this time (ms since the epoch).
    pub since_ms: Option<i64>,
    /// Only rows of this person or key: their name, a person's subject or identity
    /// (`person:ISSUER|SUBJECT`, from `detail.who`), or a key as `key:ID`.
    pub person: Option<String>,
    /// At most this many (the newest), 0 for all.
    pub limit: usize,
}

impl EventFilter {
    fn keeps(&self, row: &EventRow) -> bool {
        self.person.as_ref().is_none_or(|p| acted(row.key_id, &row.key_name, &row.detail, p))
    }
}

/// Whether the identity a row was written under (`person:ISSUER|SUBJECT` or `key:ID`, as the
/// service names callers) is `person`'s: the same identity, or a person's whose subject is
/// `person`.
pub fn is_person(identity: &str, person: &str) -> bool {
    !person.is_empty()
        && (identity == person
            || identity.strip_prefix("person:").and_then(|rest| rest.split_once('|')).is_some_and(|(_, subject)| subject == person))
}

/// Whether an audit row was written by `person`: its caller's identity (rebuilt from `who` and
/// the key id), its key's name, or the person's display name.
pub(super) fn acted(key_id: Option<i64>, key_name: &str, detail: &serde_json::Value, person: &str) -> bool {
    let who = &detail["who"];
    let identity = match (who["subject"].as_str(), who["issuer"].as_str(), key_id) {
        (Some(subject), Some(issuer), _) => format!("person:{issuer}|{subject}"),
        (_, _, Some(id)) => format!("key:{id}"),
        _ => String::new(),
    };
    is_person(&identity, person) || key_name == person || who["person"].as_str() == Some(person)
}

/// What [`Audit::verify`] found.
#[derive(Debug, Clone, Serialize)]
pub struct ChainReport {
    /// Rows checked.
    pub rows: usize,
    /// The hash of the last row (what an officer writes down to detect truncation later).
    pub head: String,
    /// Rows a retention run blanked (checked by their place in the chain, not their fields).
    pub redacted: usize,
    /// The first row that does not fit the chain, and why.
    pub broken: Option<BrokenLink>,
}

/// A row whose stored hashes do not match.
#[derive(Debug, Clone, Serialize)]
pub struct BrokenLink {
    /// Row id.
    pub id: i64,
    /// What does not match.
    pub reason: String,
}

/// The row's hash: sha256 over the previous hash and every field, each length-prefixed so no
/// two different rows serialise alike.
#[allow(clippy::too_many_arguments)]
fn row_hash(
    prev: &str,
    id: i64,
    time_ms: i64,
    key_id: Option<i64>,
    key_name: &str,
    tenant: &str,
    action: &str,
    question: &str,
    chunk_ids: &str,
    model: &str,
    outcome: &str,
    detail: &str,
) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    let key = key_id.map(|k| k.to_string()).unwrap_or_default();
    let (id, time) = (id.to_string(), time_ms.to_string());
    for field in [prev, &id, &time, &key, key_name, tenant, action, question, chunk_ids, model, outcome, detail] {
        h.update((field.len() as u64).to_le_bytes());
        h.update(field.as_bytes());
    }
    hex::encode(h.finalize())
}

/// An event row, with its JSON columns still as text (the hash is over the text as stored).
type RawEvent = (EventRow, String, String);

fn event_from_row(r: &Row) -> Result<RawEvent> {
    Ok((
        EventRow {
            id: r.int(0)?,
            time_ms: r.int(1)?,
            key_id: r.opt_int(2)?,
            key_name: r.text(3)?,
            tenant: r.text(4)?,
            action: r.text(5)?,
            question: r.text(6)?,
            chunk_ids: Vec::new(),
            model: r.text(8)?,
            outcome: r.text(9)?,
            detail: serde_json::Value::Null,
            prev_hash: r.text(11)?,
            hash: r.text(12)?,
            redacted_ms: r.opt_int(13)?,
        },
        r.text(7)?,
        r.text(10)?,
    ))
}

const EVENT_COLUMNS: &str =
    "id, time_ms, key_id, key_name, tenant, action, question, chunk_ids, model, outcome, detail, prev_hash, hash, redacted_ms";

/// The advisory lock key appends take on PostgreSQL, so two nodes never chain from one head.
const CHAIN_LOCK: i64 = 0x7261_6762_6f78_0002;

/// Appends one row to the chain inside the write transaction `sql` (which must be one over
/// every tenant); returns its id.
pub(super) fn append_in(sql: &mut dyn Sql, e: &EventRecord) -> Result<i64> {
    let chunk_ids = serde_json::to_string(e.chunk_ids).map_err(|x| Error::Bug(format!("chunk ids to JSON: {x}")))?;
    let detail = if e.detail.is_null() { "{}".to_string() } else { e.detail.to_string() };
    // The next id is never one handed out before, even when the last row was deleted:
    // SQLite's AUTOINCREMENT counter, PostgreSQL's sequence (taken under the chain's lock,
    // so ids rise in chain order).
    let id = match sql.dialect() {
        Dialect::Sqlite => {
            let last = sql.query_opt("SELECT MAX(id) FROM events", &[])?.map(|r| r.opt_int(0)).transpose()?.flatten();
            let seq = sql.query_opt("SELECT seq FROM sqlite_sequence WHERE name = 'events'", &[])?.map(|r| r.int(0)).transpose()?;
            seq.unwrap_or(0).max(last.unwrap_or(0)) + 1
        }
        Dialect::Postgres => {
            sql.query("SELECT pg_advisory_xact_lock(?1)", params![CHAIN_LOCK])?;
            sql.query_one("SELECT nextval(pg_get_serial_sequence('events', 'id'))", &[])?.int(0)?
        }
    };
    let prev = match sql.query_opt("SELECT hash FROM events ORDER BY id DESC LIMIT 1", &[])? {
        Some(r) => r.text(0)?,
        None => GENESIS_HASH.to_string(),
    };
    let time_ms = now_ms();
    let hash = row_hash(&prev, id, time_ms, e.key_id, e.key_name, e.tenant, e.action, e.question, &chunk_ids, e.model, e.outcome, &detail);
    sql.execute(
        "INSERT INTO events (id, time_ms, key_id, key_name, tenant, action, question, chunk_ids, model, outcome, detail, prev_hash, hash)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
        params![id, time_ms, e.key_id, e.key_name, e.tenant, e.action, e.question, &chunk_ids, e.model, e.outcome, &detail, prev, hash],
    )?;
    Ok(id)
}

/// Blanks the question, chunks and detail of rows `ids` inside the write transaction `sql`
/// (stamping `redacted_ms`; the triggers allow this change and no other); returns how many
/// rows it blanked (rows already blanked are left as they are).
pub(super) fn redact_in(sql: &mut dyn Sql, ids: &[i64], now_ms: i64) -> Result<usize> {
    let mut done = 0u64;
    for batch in ids.chunks(500) {
        let list = batch.iter().map(i64::to_string).collect::<Vec<_>>().join(", ");
        done += sql.execute(
            &format!(
                "UPDATE events SET question = '', chunk_ids = '[]', detail = '{{}}', redacted_ms = ?1
                 WHERE id IN ({list}) AND redacted_ms IS NULL"
            ),
            params![now_ms],
        )?;
    }
    Ok(usize::try_from(done).unwrap_or(usize::MAX))
}

/// `ids` (sorted) as inclusive `[first, last]` runs of consecutive ids.
pub(super) fn id_runs(ids: &[i64]) -> Vec<[i64; 2]> {
    let mut runs: Vec<[i64; 2]> = Vec::new();
    for &id in ids {
        match runs.last_mut() {
            Some(run) if run[1] + 1 == id => run[1] = id,
            _ => runs.push([id, id]),
        }
    }
    runs
}

/// The audit events of a catalog: a hash chain, appended to and never changed
/// ([`super::Catalog::audit`]).
pub struct Audit<'c> {
    db: &'c Database,
}

impl<'c> Audit<'c> {
    pub(super) fn new(db: &'c Database) -> Audit<'c> {
        Audit { db }
    }

    /// Appends one row to the chain; returns its id.
    pub fn append(&self, e: &EventRecord) -> Result<i64> {
        self.db.write(Scope::All, |sql| append_in(sql, e))
    }

    /// Rows matching `filter`, oldest first.
    pub fn list(&self, filter: &EventFilter) -> Result<Vec<EventRow>> {
        // With a person, the limit applies after the rows are matched (in `detail`, here).
        let limit = if filter.limit == 0 || filter.person.is_some() { i64::MAX } else { i64::try_from(filter.limit).unwrap_or(i64::MAX) };
        let rows = self.db.read(Scope::All, |sql| {
            sql.query(
                &format!(
                    "SELECT * FROM (SELECT {EVENT_COLUMNS} FROM events
                       WHERE (CAST(?1 AS TEXT) IS NULL OR tenant = ?1) AND (CAST(?2 AS BIGINT) IS NULL OR time_ms >= ?2)
                       ORDER BY id DESC LIMIT ?3) AS recent ORDER BY id"
                ),
                params![filter.tenant.as_deref(), filter.since_ms, limit],
            )
        })?;
        let mut out = Vec::new();
        for r in &rows {
            let (mut row, ids, detail) = event_from_row(r)?;
            row.chunk_ids = serde_json::from_str(&ids).map_err(|e| Error::Bug(format!("event {}: chunk ids: {e}", row.id)))?;
            row.detail = serde_json::from_str(&detail).map_err(|e| Error::Bug(format!("event {}: detail: {e}", row.id)))?;
            if filter.keeps(&row) {
                out.push(row);
            }
        }
        if filter.person.is_some() && filter.limit > 0 && out.len() > filter.limit {
            out.drain(..out.len() - filter.limit);
        }
        Ok(out)
    }

    /// Walks the whole chain from the first row: each row must name the previous row's hash and
    /// hash to what it stores. A row a retention run blanked cannot be hashed again; it must name
    /// the previous row's hash, the next row must name its own, and a later `retention` row must
    /// list it.
    pub fn verify(&self) -> Result<ChainReport> {
        let rows = self.db.read(Scope::All, |sql| sql.query(&format!("SELECT {EVENT_COLUMNS} FROM events ORDER BY id"), &[]))?;
        let mut prev = GENESIS_HASH.to_string();
        let mut count = 0;
        // Blanked rows not yet accounted for by a retention row.
        let mut unaccounted = std::collections::BTreeSet::new();
        let mut redacted = 0;
        for r in &rows {
            let (row, ids, detail) = event_from_row(r)?;
            count += 1;
            let broken = |reason: String| ChainReport { rows: count, head: prev.clone(), redacted, broken: Some(BrokenLink { id: row.id, reason }) };
            if row.prev_hash != prev {
                return Ok(broken(format!(
                    "names previous hash {} but the row before it hashes to {} (a row was removed, inserted or changed before it)",
                    short(&row.prev_hash),
                    short(&prev)
                )));
            }
            if row.redacted_ms.is_some() {
                redacted += 1;
                unaccounted.insert(row.id);
                prev = row.hash;
                continue;
            }
            let want = row_hash(
                &row.prev_hash, row.id, row.time_ms, row.key_id, &row.key_name, &row.tenant, &row.action, &row.question, &ids,
                &row.model, &row.outcome, &detail,
            );
            if want != row.hash {
                return Ok(broken(format!("its fields hash to {} but it stores {} (the row was changed)", short(&want), short(&row.hash))));
            }
            if row.action == RETENTION_ACTION {
                let named: Vec<[i64; 2]> = serde_json::from_str::<serde_json::Value>(&detail)
                    .ok()
                    .and_then(|d| serde_json::from_value(d["redacted"].clone()).ok())
                    .unwrap_or_default();
                for [first, last] in named {
                    let covered: Vec<i64> = unaccounted.range(first..=last).copied().collect();
                    for id in covered {
                        unaccounted.remove(&id);
                    }
                }
            }
            prev = row.hash;
        }
        if let Some(&id) = unaccounted.first() {
            return Ok(ChainReport {
                rows: count,
                head: prev,
                redacted,
                broken: Some(BrokenLink { id, reason: "was blanked, but no retention run after it names it (blanked by hand)".into() }),
            });
        }
        Ok(ChainReport { rows: count, head: prev, redacted, broken: None })
    }
}

fn short(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Catalog;

    #[test]
    fn a_person_is_named_by_identity_or_subject() {
        assert!(is_person("person:https://idp.example|alice", "alice"));
        assert!(is_person("person:https://idp.example|alice", "person:https://idp.example|alice"));
        assert!(is_person("key:7", "key:7"));
        assert!(!is_person("person:https://idp.example|alice", "bob"));
        assert!(!is_person("person:https://idp.example|alice", "https://idp.example"));
        assert!(!is_person("", ""), "no identity is no one");
        let who = serde_json::json!({ "who": { "person": "Alice A.", "subject": "alice", "issuer": "https://idp.example" } });
        assert!(acted(None, "Alice A.", &who, "alice") && acted(None, "Alice A.", &who, "Alice A."));
        assert!(acted(Some(3), "ci-bot", &serde_json::json!({ "who": { "key": "ci-bot" } }), "key:3"));
        assert!(!acted(Some(3), "ci-bot", &serde_json::json!({}), "alice"));
    }

    #[test]
    fn the_chain_verifies_and_tampering_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let cat = Catalog::open(&dir.path().join("c.sqlite")).unwrap();
        let detail = serde_json::json!({ "answer_id": 3 });
        for i in 0..5 {
            let q = format!("question {i}");
            let ids = [ChunkId(i)];
            let e = EventRecord { key_id: Some(1), key_name: "alice", tenant: "acme", action: "ask", question: &q, chunk_ids: &ids, detail: &detail, ..EventRecord::default() };
            cat.audit().append(&e).unwrap();
        }
        let ok = cat.audit().verify().unwrap();
        assert_eq!(ok.rows, 5);
        assert!(ok.broken.is_none());
        let rows = cat.audit().list(&EventFilter { tenant: Some("acme".into()), ..Default::default() }).unwrap();
        assert_eq!(rows.len(), 5);
        assert_eq!(rows[0].prev_hash, GENESIS_HASH);
        assert_eq!(rows[1].prev_hash, rows[0].hash);
        assert_eq!(rows[2].chunk_ids, vec![ChunkId(2)]);
        assert_eq!(rows[0].detail["answer_id"], 3);
        assert_eq!(cat.audit().list(&EventFilter { limit: 2, ..Default::default() }).unwrap()[0].id, rows[3].id, "the newest, oldest first");
        assert!(cat.audit().list(&EventFilter { tenant: Some("other".into()), ..Default::default() }).unwrap().is_empty());

        // The triggers refuse edits and deletions.
        let conn = cat.conn();
        assert!(conn.execute("UPDATE events SET question = 'x' WHERE id = 2", []).is_err());
        assert!(conn.execute("DELETE FROM events WHERE id = 2", []).is_err());
        // Someone who drops the trigger and edits a row is caught.
        conn.execute_batch("DROP TRIGGER events_no_update; UPDATE events SET question = 'edited' WHERE id = 3;").unwrap();
        drop(conn);
        let bad = cat.audit().verify().unwrap();
        assert_eq!(bad.broken.as_ref().map(|b| b.id), Some(3), "{bad:?}");
        // And deleting a row breaks the link of the one after it.
        let conn = cat.conn();
        conn.execute_batch("DROP TRIGGER events_no_delete; UPDATE events SET question = 'question 2' WHERE id = 3; DELETE FROM events WHERE id = 4;").unwrap();
        drop(conn);
        let bad = cat.audit().verify().unwrap();
        assert_eq!(bad.broken.as_ref().map(|b| b.id), Some(5), "{bad:?}");
        // Ids are never reused, so an append after the deletion still chains from the last row.
        cat.audit().append(&EventRecord { action: "search", ..Default::default() }).unwrap();
        assert_eq!(cat.audit().list(&EventFilter::default()).unwrap().last().unwrap().id, 6);
    }
}
