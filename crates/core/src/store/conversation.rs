//! Conversations and their record in the catalog: sessions and their turns (session memory), the
//! answer log (one row per answer, whose id is the answer id users rate; not the hash-chained
//! audit log, which is `events`) and feedback on answers.
//!
//! Reads and writes the `sessions`, `turns`, `answers` and `feedback` tables (their DDL is in
//! `store::schema`, run by [`Catalog::open`]; catalogs of schema 1 called `answers` `audit`, and
//! are migrated on open). May import `types` and `error` only.
//!
//! ```
//! use ragbox_core::store::{AnswerRecord, Catalog, Rating};
//! let dir = tempfile::tempdir()?;
//! let catalog = Catalog::open(&dir.path().join("catalog.sqlite"))?;
//! let tenant = catalog.create_tenant("acme", "fake", 16)?;
//! let session = catalog.sessions().create(tenant.id)?;
//! let timings = serde_json::json!({ "total_ms": 12.5 });
//! let answer = catalog.answers().record(&AnswerRecord {
//!     tenant: tenant.id,
//!     session: Some(session),
//!     question: "Who approves travel?",
//!     standalone: "Who approves travel?",
//!     chunk_ids: &[],
//!     model: "",
//!     refused: true,
//!     outcome: "no_good_source",
//!     answer: "I could not find this in the documents.",
//!     evidence: &serde_json::Value::Null,
//!     timings: &timings,
//!     asker: "",
//! })?;
//! catalog.sessions().add_turn(session, "Who approves travel?", "Who approves travel?", "I could not find this.", Some(answer))?;
//! catalog.answers().add_feedback(answer, "down".parse::<Rating>()?, Some("it is in the handbook"))?;
//! assert_eq!(catalog.answers().get(answer)?.map(|a| a.feedback.len()), Some(1));
//! # Ok::<(), ragbox_core::Error>(())
//! ```

use serde::Serialize;

use super::now_ms;
use super::sql::{params, Database, Row, Scope, Sql};
use crate::error::{Error, Result};
use crate::types::ChunkId;

/// One answer as the answer log records it, written by [`Answers::record`].
#[derive(Debug, Clone, Copy, Serialize)]
pub struct AnswerRecord<'a> {
    /// Tenant row id.
    pub tenant: i64,
    /// The session asked in, if any.
    pub session: Option<i64>,
    /// The question as asked.
    pub question: &'a str,
    /// The question as retrieval saw it: rewritten when it referred back, else `question`.
    pub standalone: &'a str,
    /// The chunks served to the generator (or shown as the closest material when refused).
    pub chunk_ids: &'a [ChunkId],
    /// Generator model; empty when the answer was refused without a generator call.
    pub model: &'a str,
    /// Whether ragbox declined to answer.
    pub refused: bool,
    /// `answered`, `does_not_say` or `no_good_source`.
    pub outcome: &'a str,
    /// The answer text as shown.
    pub answer: &'a str,
    /// The evidence quoted and the answerability decision (a JSON value; `null` when none).
    pub evidence: &'a serde_json::Value,
    /// Stage timings (a JSON object).
    pub timings: &'a serde_json::Value,
    /// Who asked, as the service names callers (`person:ISSUER|SUBJECT`, `key:ID`); empty for
    /// the command line.
    pub asker: &'a str,
}

/// A thumbs up or down on an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Rating {
    /// The answer helped.
    Up,
    /// The answer was wrong or unhelpful.
    Down,
}

impl Rating {
    /// `"up"` or `"down"`, as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            Rating::Up => "up",
            Rating::Down => "down",
        }
    }
}

impl std::fmt::Display for Rating {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Rating {
    type Err = Error;

    /// `up` or `down`, in any case.
    fn from_str(s: &str) -> Result<Rating> {
        match s.trim().to_ascii_lowercase().as_str() {
            "up" => Ok(Rating::Up),
            "down" => Ok(Rating::Down),
            _ => Err(Error::Invalid(format!("rating `{s}`: use up or down"))),
        }
    }
}

/// One piece of feedback on an answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FeedbackRow {
    /// Row id.
    pub id: i64,
    /// The answer rated (its id in the answer log).
    pub answer_id: i64,
    /// Up or down.
    pub rating: Rating,
    /// What the person said, if anything.
    pub comment: Option<String>,
    /// When, in ms since the epoch.
    pub created_ms: i64,
}

/// An answer as the answer log holds it, with its feedback.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AnswerRow {
    /// The answer id (what `ragbox feedback` takes).
    pub id: i64,
    /// Tenant name.
    pub tenant: String,
    /// The session asked in, if any.
    pub session: Option<i64>,
    /// The question as asked.
    pub question: String,
    /// The question as retrieval saw it.
    pub standalone: String,
    /// The chunks served to the generator (or shown as the closest material).
    pub chunk_ids: Vec<ChunkId>,
    /// Generator model; empty when refused without a generator call.
    pub model: String,
    /// Whether ragbox declined to answer.
    pub refused: bool,
    /// `answered`, `does_not_say` or `no_good_source` (empty for answers logged before the
    /// outcome was).
    pub outcome: String,
    /// The answer text as shown.
    pub answer: String,
    /// The evidence quoted and the answerability decision (`null` when none).
    pub evidence: serde_json::Value,
    /// Stage timings (a JSON object).
    pub timings: serde_json::Value,
    /// When, in ms since the epoch.
    pub created_ms: i64,
    /// Feedback given on it, oldest first.
    pub feedback: Vec<FeedbackRow>,
}

/// One question and answer of a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TurnRow {
    /// Row id.
    pub id: i64,
    /// The session.
    pub session: i64,
    /// The question as asked.
    pub question: String,
    /// The question as retrieval saw it: rewritten when it referred back, else `question`.
    pub standalone: String,
    /// The answer text as shown.
    pub answer: String,
    /// Its answer id in the answer log, if one was written.
    pub answer_id: Option<i64>,
    /// When, in ms since the epoch.
    pub created_ms: i64,
}

/// A row limit for SQL (`LIMIT` takes an i64).
fn sql_limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

const ANSWER_COLUMNS: &str = "a.id, t.name, a.session_id, a.question, a.standalone, a.chunk_ids, a.model, a.refused, a.answer,
     a.timings, a.created_ms, a.outcome, a.evidence
     FROM answers a JOIN tenants t ON t.id = a.tenant_id";

/// An answer log row (its JSON columns parsed), without its feedback.
fn answer_from_row(r: &Row) -> Result<AnswerRow> {
    let id = r.int(0)?;
    let json = |i: usize, what: &str| -> Result<serde_json::Value> {
        serde_json::from_str(&r.text(i)?).map_err(|e| Error::Bug(format!("answer {id}: {what}: {e}")))
    };
    Ok(AnswerRow {
        id,
        tenant: r.text(1)?,
        session: r.opt_int(2)?,
        question: r.text(3)?,
        standalone: r.text(4)?,
        chunk_ids: serde_json::from_str(&r.text(5)?).map_err(|e| Error::Bug(format!("answer {id}: chunk ids: {e}")))?,
        model: r.text(6)?,
        refused: r.flag(7)?,
        answer: r.text(8)?,
        timings: json(9, "timings")?,
        created_ms: r.int(10)?,
        outcome: r.text(11)?,
        evidence: json(12, "evidence")?,
        feedback: Vec::new(),
    })
}

fn turn_from_row(r: &Row) -> Result<TurnRow> {
    Ok(TurnRow {
        id: r.int(0)?,
        session: r.int(1)?,
        question: r.text(2)?,
        standalone: r.text(3)?,
        answer: r.text(4)?,
        answer_id: r.opt_int(5)?,
        created_ms: r.int(6)?,
    })
}

/// The conversations of a catalog: sessions and their turns ([`super::Catalog::sessions`]).
pub struct Sessions<'c> {
    db: &'c Database,
}

impl<'c> Sessions<'c> {
    pub(super) fn new(db: &'c Database) -> Sessions<'c> {
        Sessions { db }
    }

    /// Starts a session of `tenant`; returns its id.
    pub fn create(&self, tenant: i64) -> Result<i64> {
        self.db.write(Scope::Tenant(tenant), |sql| {
            let known = sql.query_one("SELECT EXISTS (SELECT 1 FROM tenants WHERE id = ?1)", params![tenant])?.flag(0)?;
            if !known {
                return Err(Error::Bug(format!("session for tenant row {tenant}, which does not exist")));
            }
            sql.query_one("INSERT INTO sessions (tenant_id, created_ms) VALUES (?1, ?2) RETURNING id", params![tenant, now_ms()])?.int(0)
        })
    }

    /// The tenant a session belongs to; `None` when there is no such session. Callers check it
    /// against the tenant asking before they use the session's turns.
    pub fn tenant_of(&self, session: i64) -> Result<Option<i64>> {
        self.db.read(Scope::All, |sql| {
            sql.query_opt("SELECT tenant_id FROM sessions WHERE id = ?1", params![session])?.map(|r| r.int(0)).transpose()
        })
    }

    /// A tenant's sessions, newest first: (id, created ms, turns).
    pub fn list(&self, tenant: i64, limit: usize) -> Result<Vec<(i64, i64, usize)>> {
        self.db.read(Scope::Tenant(tenant), |sql| {
            sql.query(
                "SELECT s.id, s.created_ms, (SELECT COUNT(*) FROM turns t WHERE t.session_id = s.id)
                 FROM sessions s WHERE s.tenant_id = ?1 ORDER BY s.id DESC LIMIT ?2",
                params![tenant, sql_limit(limit)],
            )?
            .iter()
            .map(|r| Ok((r.int(0)?, r.int(1)?, r.int(2)? as usize)))
            .collect()
        })
    }

    /// The last `limit` turns of a session, oldest first.
    pub fn recent_turns(&self, session: i64, limit: usize) -> Result<Vec<TurnRow>> {
        let mut turns = self.db.read(Scope::All, |sql| {
            sql.query(
                "SELECT id, session_id, question, standalone, answer, answer_id, created_ms
                 FROM turns WHERE session_id = ?1 ORDER BY id DESC LIMIT ?2",
                params![session, sql_limit(limit)],
            )?
            .iter()
            .map(turn_from_row)
            .collect::<Result<Vec<_>>>()
        })?;
        turns.reverse();
        Ok(turns)
    }

    /// Appends a turn to a session; returns its id. An unknown session is a user error.
    pub fn add_turn(&self, session: i64, question: &str, standalone: &str, answer: &str, answer_id: Option<i64>) -> Result<i64> {
        self.db.write(Scope::All, |sql| {
            let known = sql.query_one("SELECT EXISTS (SELECT 1 FROM sessions WHERE id = ?1)", params![session])?.flag(0)?;
            if !known {
                return Err(Error::Invalid(format!("no session {session}; start a new one (leave out --session)")));
            }
            sql.query_one(
                "INSERT INTO turns (session_id, question, standalone, answer, answer_id, created_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6) RETURNING id",
                params![session, question, standalone, answer, answer_id, now_ms()],
            )?
            .int(0)
        })
    }
}

/// The answer log of a catalog, with the feedback on each answer ([`super::Catalog::answers`]).
pub struct Answers<'c> {
    db: &'c Database,
}

impl<'c> Answers<'c> {
    pub(super) fn new(db: &'c Database) -> Answers<'c> {
        Answers { db }
    }

    /// Writes one answer to the answer log; returns its id, the answer id users rate with
    /// `ragbox feedback`. A session of another tenant is refused.
    pub fn record(&self, record: &AnswerRecord) -> Result<i64> {
        let chunk_ids = serde_json::to_string(record.chunk_ids).map_err(|e| Error::Bug(format!("chunk ids to JSON: {e}")))?;
        let timings = serde_json::to_string(record.timings).map_err(|e| Error::Bug(format!("timings to JSON: {e}")))?;
        let evidence = serde_json::to_string(record.evidence).map_err(|e| Error::Bug(format!("evidence to JSON: {e}")))?;
        self.db.write(Scope::Tenant(record.tenant), |sql| {
            if let Some(session) = record.session {
                let owner = sql.query_opt("SELECT tenant_id FROM sessions WHERE id = ?1", params![session])?.map(|r| r.int(0)).transpose()?;
                if owner != Some(record.tenant) {
                    return Err(Error::Invalid(format!(
                        "no session {session} for this tenant; start a new one (leave out --session)"
                    )));
                }
            }
            sql.query_one(
                "INSERT INTO answers (tenant_id, session_id, question, standalone, chunk_ids, model, refused, answer, timings, created_ms, outcome, evidence, asker)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13) RETURNING id",
                params![
                    record.tenant,
                    record.session,
                    record.question,
                    record.standalone,
                    &chunk_ids,
                    record.model,
                    record.refused,
                    record.answer,
                    &timings,
                    now_ms(),
                    record.outcome,
                    &evidence,
                    record.asker
                ],
            )?
            .int(0)
        })
    }

    /// The answer log's row of answer `id`, with its feedback; `None` when there is none.
    pub fn get(&self, id: i64) -> Result<Option<AnswerRow>> {
        self.db.read(Scope::All, |sql| {
            match sql.query_opt(&format!("SELECT {ANSWER_COLUMNS} WHERE a.id = ?1"), params![id])? {
                Some(r) => Ok(Some(with_feedback(sql, answer_from_row(&r)?)?)),
                None => Ok(None),
            }
        })
    }

    /// A tenant's last `limit` answers, newest first, each with its feedback.
    pub fn list(&self, tenant: i64, limit: usize) -> Result<Vec<AnswerRow>> {
        self.db.read(Scope::Tenant(tenant), |sql| {
            let rows = sql.query(&format!("SELECT {ANSWER_COLUMNS} WHERE a.tenant_id = ?1 ORDER BY a.id DESC LIMIT ?2"), params![tenant, sql_limit(limit)])?;
            rows.iter().map(|r| with_feedback(sql, answer_from_row(r)?)).collect()
        })
    }

    /// Rates answer `answer_id`; returns the feedback's id. An unknown answer id is a user error.
    pub fn add_feedback(&self, answer_id: i64, rating: Rating, comment: Option<&str>) -> Result<i64> {
        self.db.write(Scope::All, |sql| {
            let known = sql.query_one("SELECT EXISTS (SELECT 1 FROM answers WHERE id = ?1)", params![answer_id])?.flag(0)?;
            if !known {
                return Err(Error::Invalid(format!(
                    "no answer {answer_id}: answer ids are printed by `ragbox ask --json` (field `answer_id`); rate one of those"
                )));
            }
            sql.query_one(
                "INSERT INTO feedback (answer_id, rating, comment, created_ms) VALUES (?1, ?2, ?3, ?4) RETURNING id",
                params![answer_id, rating.as_str(), comment, now_ms()],
            )?
            .int(0)
        })
    }
}

/// `row` with its feedback attached.
fn with_feedback(sql: &mut dyn Sql, mut row: AnswerRow) -> Result<AnswerRow> {
    let rows = sql.query("SELECT id, answer_id, rating, comment, created_ms FROM feedback WHERE answer_id = ?1 ORDER BY id", params![row.id])?;
    for r in rows {
        let id = r.int(0)?;
        let rating = match r.text(2)?.as_str() {
            "up" => Rating::Up,
            "down" => Rating::Down,
            other => return Err(Error::Bug(format!("feedback {id}: rating `{other}`"))),
        };
        row.feedback.push(FeedbackRow { id, answer_id: r.int(1)?, rating, comment: r.opt_text(3)?, created_ms: r.int(4)? });
    }
    Ok(row)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Catalog;
    use crate::error::Fault;

    fn catalog() -> (tempfile::TempDir, Catalog) {
        let dir = tempfile::tempdir().unwrap();
        let cat = Catalog::open(&dir.path().join("c.sqlite")).unwrap();
        (dir, cat)
    }

    fn record<'a>(tenant: i64, session: Option<i64>, ids: &'a [ChunkId], timings: &'a serde_json::Value) -> AnswerRecord<'a> {
        AnswerRecord {
            tenant,
            session,
            question: "And for contractors?",
            standalone: "What is the travel insurance limit for contractors?",
            chunk_ids: ids,
            model: "qwen",
            refused: false,
            outcome: "answered",
            answer: "Contractors are covered up to £2,000 [1].",
            evidence: &serde_json::Value::Null,
            timings,
            asker: "",
        }
    }

    #[test]
    fn session_round_trip_and_tenant_separation() {
        let (_dir, cat) = catalog();
        let a = cat.create_tenant("a", "m", 4).unwrap();
        let b = cat.create_tenant("b", "m", 4).unwrap();
        let sa = cat.sessions().create(a.id).unwrap();
        let sb = cat.sessions().create(b.id).unwrap();
        assert_ne!(sa, sb);
        assert_eq!(cat.sessions().tenant_of(sa).unwrap(), Some(a.id));
        assert_eq!(cat.sessions().tenant_of(sb).unwrap(), Some(b.id));
        assert_eq!(cat.sessions().tenant_of(sb + 100).unwrap(), None);
        assert!(cat.sessions().create(b.id + 100).is_err(), "no session for a tenant that does not exist");

        let t = cat.sessions().add_turn(sa, "Who approves it?", "Who approves travel requests?", "Line managers [1].", None).unwrap();
        let turns = cat.sessions().recent_turns(sa, 10).unwrap();
        assert_eq!(turns.len(), 1);
        assert_eq!(turns[0].id, t);
        assert_eq!(turns[0].session, sa);
        assert_eq!(turns[0].question, "Who approves it?");
        assert_eq!(turns[0].standalone, "Who approves travel requests?");
        assert_eq!(turns[0].answer, "Line managers [1].");
        assert_eq!(turns[0].answer_id, None);
        assert!(turns[0].created_ms > 0);
        assert!(cat.sessions().recent_turns(sb, 10).unwrap().is_empty(), "turns stay in their session");

        // An answer cannot name another tenant's session.
        let v = serde_json::json!({});
        let e = cat.answers().record(&record(b.id, Some(sa), &[], &v)).unwrap_err();
        assert_eq!(e.fault(), Fault::User, "{e}");
        let e = cat.sessions().add_turn(sb + 100, "q", "q", "a", None).unwrap_err();
        assert_eq!(e.fault(), Fault::User, "{e}");
    }

    #[test]
    fn recent_turns_are_the_last_ones_oldest_first() {
        let (_dir, cat) = catalog();
        let t = cat.create_tenant("a", "m", 4).unwrap();
        let s = cat.sessions().create(t.id).unwrap();
        for i in 0..5 {
            cat.sessions().add_turn(s, &format!("q{i}"), &format!("s{i}"), &format!("a{i}"), None).unwrap();
        }
        let questions = |n| cat.sessions().recent_turns(s, n).unwrap().into_iter().map(|t| t.question).collect::<Vec<_>>();
        assert_eq!(questions(3), ["q2", "q3", "q4"]);
        assert_eq!(questions(10), ["q0", "q1", "q2", "q3", "q4"]);
        assert!(questions(0).is_empty());
    }

    #[test]
    fn answer_log_and_feedback_round_trip() {
        let (_dir, cat) = catalog();
        let t = cat.create_tenant("acme", "m", 4).unwrap();
        let s = cat.sessions().create(t.id).unwrap();
        let ids = [ChunkId(7), ChunkId(u64::from(u32::MAX) + 3)];
        let timings = serde_json::json!({ "retrieve_ms": 3.5, "generate_ms": 120.0 });
        let first = cat.answers().record(&record(t.id, Some(s), &ids, &timings)).unwrap();
        let refused = AnswerRecord { session: None, model: "", refused: true, chunk_ids: &[], ..record(t.id, None, &[], &timings) };
        let second = cat.answers().record(&refused).unwrap();
        assert!(second > first);
        cat.sessions().add_turn(s, "And for contractors?", "What is the travel insurance limit for contractors?", "£2,000", Some(first))
            .unwrap();
        assert_eq!(cat.sessions().recent_turns(s, 1).unwrap()[0].answer_id, Some(first));

        let up = cat.answers().add_feedback(first, Rating::Up, None).unwrap();
        let down = cat.answers().add_feedback(first, "Down".parse().unwrap(), Some("wrong office")).unwrap();
        assert!(down > up);

        let row = cat.answers().get(first).unwrap().unwrap();
        assert_eq!(row.id, first);
        assert_eq!(row.tenant, "acme");
        assert_eq!(row.session, Some(s));
        assert_eq!(row.question, "And for contractors?");
        assert_eq!(row.standalone, "What is the travel insurance limit for contractors?");
        assert_eq!(row.chunk_ids, ids);
        assert_eq!(row.model, "qwen");
        assert!(!row.refused);
        assert_eq!(row.timings, timings);
        assert_eq!(row.feedback.len(), 2);
        assert_eq!((row.feedback[0].rating, row.feedback[0].comment.as_deref()), (Rating::Up, None));
        assert_eq!((row.feedback[1].rating, row.feedback[1].comment.as_deref()), (Rating::Down, Some("wrong office")));
        assert_eq!(row.feedback[1].answer_id, first);

        let json = serde_json::to_value(&row).unwrap();
        assert_eq!(json["chunk_ids"], serde_json::json!([7, u64::from(u32::MAX) + 3]));
        assert_eq!(json["feedback"][1]["rating"], "down");

        let entries = cat.answers().list(t.id, 10).unwrap();
        assert_eq!(entries.iter().map(|e| e.id).collect::<Vec<_>>(), [second, first], "newest first");
        assert!(entries[0].refused && entries[0].model.is_empty() && entries[0].session.is_none());
        assert_eq!(cat.answers().list(t.id, 1).unwrap().len(), 1);
        let other = cat.create_tenant("other", "m", 4).unwrap();
        assert!(cat.answers().list(other.id, 10).unwrap().is_empty());
        assert!(cat.answers().get(second + 1).unwrap().is_none());
    }

    #[test]
    fn feedback_on_an_unknown_answer_is_a_user_error() {
        let (_dir, cat) = catalog();
        let e = cat.answers().add_feedback(42, Rating::Down, None).unwrap_err();
        assert_eq!(e.fault(), Fault::User);
        let msg = e.to_string();
        assert!(msg.contains("no answer 42") && msg.contains("ragbox ask --json"), "{msg}");
        let e = "sideways".parse::<Rating>().unwrap_err();
        assert_eq!(e.fault(), Fault::User);
        assert!(e.to_string().contains("use up or down"), "{e}");
        assert_eq!(Rating::Up.to_string(), "up");
        assert_eq!(" UP ".parse::<Rating>().unwrap(), Rating::Up);
    }

    #[test]
    fn a_catalog_from_before_the_conversation_tables_gains_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.sqlite");
        {
            // What the first release wrote: its schema only, stamped version 1, with a tenant.
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.execute_batch(super::super::schema::CATALOG).unwrap();
            conn.execute("INSERT INTO meta (key, value) VALUES ('schema_version', '1')", []).unwrap();
            conn.execute("INSERT INTO tenants (name, model, dims) VALUES ('old', 'm', 4)", []).unwrap();
            let n: i64 =
                conn.query_row("SELECT COUNT(*) FROM sqlite_master WHERE name = 'sessions'", [], |r| r.get(0)).unwrap();
            assert_eq!(n, 0);
        }
        let t = {
            let cat = Catalog::open(&path).unwrap();
            let t = cat.require_tenant("old").unwrap();
            let s = cat.sessions().create(t.id).unwrap();
            cat.sessions().add_turn(s, "q", "q", "a", None).unwrap();
            let v = serde_json::json!({});
            let id = cat.answers().record(&record(t.id, Some(s), &[], &v)).unwrap();
            cat.answers().add_feedback(id, Rating::Up, None).unwrap();
            t
        };
        // Reopening keeps the rows (the DDL is idempotent).
        let cat = Catalog::open(&path).unwrap();
        let entries = cat.answers().list(t.id, 10).unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].feedback.len(), 1);
        let s = entries[0].session.unwrap();
        assert_eq!(cat.sessions().recent_turns(s, 5).unwrap().len(), 1);
        // Schema 1 without the answer log's table migrates to 2 all the same.
        let version: String = cat.conn().query_row("SELECT value FROM meta WHERE key = 'schema_version'", [], |r| r.get(0)).unwrap();
        assert_eq!(version, "2");
    }
}
