//! A tenant's or a person's conversations, as JSON lines: what `ragbox export` and the export
//! routes hand out (what the appliance keeps about someone, in a form they can read).
//!
//! One line per record, each with a `type`: first `export` (what was asked for and when), then
//! each `session` with its turns, then each `answer` with the passages it cited (document path,
//! title, section, lines, page; `gone` when the document has since changed) and the feedback on
//! it. Sessions and answers are matched to a person by their owner and asker (see
//! [`super::events::is_person`]); `since` keeps rows written at or after it.
//!
//! Reads `sessions`, `session_owners`, `turns`, `answers`, `feedback` and, for the sources,
//! `chunks` and `documents`. May import `types` and `error` only.

use std::collections::BTreeMap;

use serde::Serialize;

use super::catalog::{Catalog, TenantRow};
use super::events::is_person;
use super::sql::{params, Scope};
use crate::error::{Error, Result};
use crate::types::ChunkId;

/// What to export.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ExportFilter {
    /// Only this person's sessions and answers (any of these names: an identity, a subject, a
    /// key as `key:ID`; an empty name: those asked with no identity, the command line's);
    /// everyone's when the list is empty.
    pub person: Vec<String>,
    /// Only rows written at or after this time, ms since the epoch.
    pub since_ms: Option<i64>,
}

impl ExportFilter {
    fn keeps(&self, identities: &[&str]) -> bool {
        self.person.is_empty()
            || self.person.iter().any(|p| match p.is_empty() {
                true => identities.iter().all(|id| id.is_empty()),
                false => identities.iter().any(|id| is_person(id, p)),
            })
    }
}

/// How many records an export wrote.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct ExportCounts {
    /// Sessions.
    pub sessions: usize,
    /// Turns, in those sessions.
    pub turns: usize,
    /// Answers.
    pub answers: usize,
    /// Feedback rows, on those answers.
    pub feedback: usize,
}

/// Rows read per query.
const PAGE: i64 = 500;

fn json_text(text: &str, what: &str) -> Result<serde_json::Value> {
    serde_json::from_str(text).map_err(|e| Error::Bug(format!("{what}: {e}")))
}

/// Writes `tenant`'s conversations matching `filter` to `out`, one JSON value per line's record;
/// returns the counts.
pub fn export(catalog: &Catalog, tenant: &TenantRow, filter: &ExportFilter, out: &mut dyn FnMut(&serde_json::Value) -> Result<()>) -> Result<ExportCounts> {
    let since = filter.since_ms.unwrap_or(i64::MIN);
    out(&serde_json::json!({
        "type": "export",
        "tenant": tenant.name,
        "person": filter.person.first(),
        "since_ms": filter.since_ms,
        "generated_ms": super::now_ms(),
        "ragbox": env!("CARGO_PKG_VERSION"),
    }))?;
    let mut counts = ExportCounts::default();
    let db = catalog.database();
    let owners = catalog.session_owners(tenant.id)?;

    // Sessions, a page at a time, each with its turns since the cutoff.
    let mut after = 0i64;
    loop {
        let page = db.read(Scope::Tenant(tenant.id), |sql| {
            sql.query("SELECT id, created_ms FROM sessions WHERE tenant_id = ?1 AND id > ?2 ORDER BY id LIMIT ?3", params![tenant.id, after, PAGE])
        })?;
        let Some(last) = page.last() else { break };
        after = last.int(0)?;
        for r in &page {
            let (id, created_ms) = (r.int(0)?, r.int(1)?);
            let owner = owners.get(&id).map(String::as_str).unwrap_or("");
            if !filter.keeps(&[owner]) {
                continue;
            }
            let turns = db.read(Scope::All, |sql| {
                sql.query(
                    "SELECT id, question, standalone, answer, answer_id, created_ms FROM turns WHERE session_id = ?1 AND created_ms >= ?2 ORDER BY id",
                    params![id, since],
                )
            })?;
            if turns.is_empty() && created_ms < since {
                continue;
            }
            let turns: Vec<serde_json::Value> = turns
                .iter()
                .map(|t| {
                    Ok(serde_json::json!({
                        "id": t.int(0)?, "question": t.text(1)?, "standalone": t.text(2)?, "answer": t.text(3)?,
                        "answer_id": t.opt_int(4)?, "created_ms": t.int(5)?,
                    }))
                })
                .collect::<Result<_>>()?;
            counts.sessions += 1;
            counts.turns += turns.len();
            out(&serde_json::json!({ "type": "session", "tenant": tenant.name, "id": id, "owner": owner, "created_ms": created_ms, "turns": turns }))?;
        }
    }

    // Answers, a page at a time, each with its sources and feedback.
    let mut after = 0i64;
    loop {
        let page = db.read(Scope::Tenant(tenant.id), |sql| {
            sql.query(
                "SELECT id, session_id, asker, question, standalone, answer, outcome, refused, model, chunk_ids, evidence, created_ms
                 FROM answers WHERE tenant_id = ?1 AND id > ?2 AND created_ms >= ?3 ORDER BY id LIMIT ?4",
                params![tenant.id, after, since, PAGE],
            )
        })?;
        let Some(last) = page.last() else { break };
        after = last.int(0)?;
        for r in &page {
            let (id, session, asker) = (r.int(0)?, r.opt_int(1)?, r.text(2)?);
            let owner = session.and_then(|s| owners.get(&s)).map(String::as_str).unwrap_or("");
            if !filter.keeps(&[&asker, owner]) {
                continue;
            }
            let ids: Vec<ChunkId> = serde_json::from_str(&r.text(9)?).map_err(|e| Error::Bug(format!("answer {id}: chunk ids: {e}")))?;
            let found: BTreeMap<ChunkId, _> = catalog.chunks(tenant.id, &ids)?.into_iter().map(|c| (c.id, c)).collect();
            let sources: Vec<serde_json::Value> = ids
                .iter()
                .map(|cid| match found.get(cid) {
                    Some(c) => serde_json::json!({
                        "chunk": cid.0, "path": c.path, "title": c.title, "section": c.section_path,
                        "lines": [c.lines.first, c.lines.last], "page": c.page,
                    }),
                    None => serde_json::json!({ "chunk": cid.0, "gone": true }),
                })
                .collect();
            let feedback = db.read(Scope::All, |sql| {
                sql.query("SELECT rating, comment, created_ms FROM feedback WHERE answer_id = ?1 ORDER BY id", params![id])
            })?;
            let feedback: Vec<serde_json::Value> = feedback
                .iter()
                .map(|f| Ok(serde_json::json!({ "rating": f.text(0)?, "comment": f.opt_text(1)?, "created_ms": f.int(2)? })))
                .collect::<Result<_>>()?;
            counts.answers += 1;
            counts.feedback += feedback.len();
            out(&serde_json::json!({
                "type": "answer", "tenant": tenant.name, "id": id, "session": session, "asker": asker,
                "created_ms": r.int(11)?, "question": r.text(3)?, "standalone": r.text(4)?, "answer": r.text(5)?,
                "outcome": r.text(6)?, "refused": r.flag(7)?, "model": r.text(8)?,
                "evidence": json_text(&r.text(10)?, "evidence")?, "sources": sources, "feedback": feedback,
            }))?;
        }
    }
    Ok(counts)
}
