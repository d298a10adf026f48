//! Search, ask and chat turns: retrieval, refusal without the LLM, streamed answers, follow-up
//! rewrites, and the answer's records: its answer log row (the answer id users rate) and its
//! hash-chained audit event.

use std::sync::Arc;

use serde::Serialize;

use super::{Caller, Service};
use ragbox_core::conversation::memory::PriorTurn;
use ragbox_core::answer::Answer;
use ragbox_core::conversation::{standalone, Standalone};
use ragbox_core::error::{Error, Result};
use ragbox_core::generate::{block_on, Generator, TokenSink};
use ragbox_core::retrieve::{Retrieval, Retriever};
use ragbox_core::store::{AnswerRecord, EventRecord, TenantRow};
use ragbox_core::types::ChunkId;

/// Ranked passages for a query, and a note when reranking was wanted but could not run.
#[derive(Debug, Serialize)]
pub struct SearchResult {
    /// Every stage's output.
    pub retrieval: Retrieval,
    /// Why retrieval ran without a reranker, if it did.
    pub note: Option<String>,
}

/// An answer and the retrieval it came from.
#[derive(Debug)]
pub struct Asked {
    /// What retrieval found.
    pub retrieval: Retrieval,
    /// The answer (its `answer_id` set).
    pub answer: Answer,
    /// Why retrieval ran without a reranker, if it did.
    pub note: Option<String>,
    /// Warnings for the person asking (a remote generator: text left the machine).
    pub warnings: Vec<String>,
    /// The reader went away (or a deadline passed) before the answer finished.
    pub cancelled: bool,
}

/// One turn of a chat session.
#[derive(Debug, Serialize)]
pub struct ChatTurn {
    /// The session.
    pub session: i64,
    /// The turn's id.
    pub turn: i64,
    /// How the question was resolved against the session.
    pub follow_up: Standalone,
    /// The answer.
    pub answer: Answer,
}

/// How to search.
#[derive(Debug, Clone, Default)]
pub struct SearchOptions {
    /// Passages to return (`None`: `retrieve.top_k`).
    pub k: Option<usize>,
    /// Embed with this model (any but the index's is refused).
    pub model: Option<String>,
    /// Skip the reranker.
    pub no_rerank: bool,
}

/// How to answer.
#[derive(Debug, Clone, Default)]
pub struct AskOptions {
    /// Generate with this local model instead of the configured one.
    pub llm: Option<String>,
    /// Skip the reranker.
    pub no_rerank: bool,
}

impl Service {
    fn retriever(&self, caller: &Caller, tenant: &TenantRow, model: Option<&str>, rerank: bool, top_k: Option<usize>) -> Result<(Retriever<'_>, Option<String>)> {
        let mut options = self.app.retrieve_options();
        if let Some(k) = top_k {
            options.top_k = k;
        }
        let (mut retriever, note) = self.app.retriever(&self.store, tenant, model, rerank, options)?;
        self.restrict(caller, tenant, &mut retriever)?;
        Ok((retriever, note))
    }

    /// Filters `retriever` to what `caller` may read (nothing to do for an audience of everyone).
    fn restrict(&self, caller: &Caller, tenant: &TenantRow, retriever: &mut Retriever<'_>) -> Result<()> {
        if !caller.audience.is_everyone() {
            retriever.restrict(&caller.audience, &self.store.access_map(tenant)?);
        }
        Ok(())
    }

    /// Whether `caller` may continue a session owned by `owner`: its owner, or (for a session
    /// without one, from the command line or from before owners were kept) a caller who reads
    /// every document; the command line reaches all.
    fn owns(caller: &Caller, owner: Option<&String>) -> bool {
        match (caller.identity(), owner) {
            (None, _) => true,
            (Some(me), Some(them)) => me == *them,
            (Some(_), None) => caller.audience.is_everyone(),
        }
    }

    /// Ranked passages of `tenant` for `query`.
    pub fn search(&self, caller: &Caller, tenant: &str, query: &str, o: &SearchOptions) -> Result<SearchResult> {
        if o.k == Some(0) {
            return Err(Error::Invalid("-k must be at least 1".into()));
        }
        let tenant = self.tenant(caller, tenant)?;
        let (retriever, note) = self.retriever(caller, &tenant, o.model.as_deref(), !o.no_rerank, o.k)?;
        let outcome = retriever.retrieve(query);
        let ids: Vec<ChunkId> = outcome.as_ref().map(|r| r.hits.iter().map(|h| h.chunk.id).collect()).unwrap_or_default();
        let status = match &outcome {
            Ok(r) if r.refused => "refused".to_string(),
            Ok(_) => "ok".to_string(),
            Err(e) => format!("error: {e}"),
        };
        let detail = access_detail(caller, outcome.as_ref().ok());
        self.audit(
            caller,
            EventRecord { tenant: &tenant.name, action: "search", question: query, chunk_ids: &ids, outcome: &status, detail: &detail, ..EventRecord::default() },
        )?;
        Ok(SearchResult { retrieval: outcome?, note })
    }

    /// Answers `question` from `tenant`, streaming tokens into `sink`; writes the answer's answer
    /// log row and audit event. A question with no good source is refused without waiting for the
    /// LLM (whose load starts beside retrieval, [`App::preload_generator`]).
    pub fn ask(&self, caller: &Caller, tenant: &str, question: &str, o: &AskOptions, sink: &mut (dyn TokenSink + Send)) -> Result<Asked> {
        if question.trim().is_empty() {
            return Err(Error::Invalid("the question is empty; type what you want to know".into()));
        }
        let tenant = self.tenant(caller, tenant)?;
        self.answer(caller, &tenant, question, question, 0.0, None, o, "ask", sink)
    }

    /// Retrieves for `standalone` (which took `rewrite_ms` to make) and answers `question`.
    #[allow(clippy::too_many_arguments)]
    fn answer(
        &self,
        caller: &Caller,
        tenant: &TenantRow,
        question: &str,
        standalone: &str,
        rewrite_ms: f64,
        session: Option<i64>,
        o: &AskOptions,
        action: &str,
        sink: &mut (dyn TokenSink + Send),
    ) -> Result<Asked> {
        // The LLM loads while retrieval runs; a refusal does not wait for it.
        let mut asking = self.app.asking(&self.store, tenant, !o.no_rerank, o.llm.as_deref())?;
        self.restrict(caller, tenant, &mut asking.retriever)?;
        let note = asking.note.clone();
        let mut warnings = Vec::new();
        let result = (|| -> Result<(Retrieval, Answer)> {
            let retrieval = asking.retriever.retrieve(standalone)?;
            let answer = if retrieval.no_good_source() {
                let a = asking.refusal(question, standalone, &retrieval);
                sink.token(&a.answer);
                a
            } else {
                let waited = std::time::Instant::now();
                let generator = self.generator(o.llm.as_deref(), &mut warnings)?;
                let model_wait_ms = waited.elapsed().as_secs_f64() * 1e3;
                let answerer = asking.answerer(generator)?;
                let mut answer = block_on(answerer.answer(question, standalone, &retrieval, sink))?;
                answer.timings.model_wait_ms = model_wait_ms;
                answer.timings.total_ms += model_wait_ms;
                answer
            };
            Ok((retrieval, answer))
        })();
        let (retrieval, mut answer) = match result {
            Ok(r) => r,
            Err(e) => {
                let outcome = format!("error: {e}");
                let detail = serde_json::json!({ "session": session });
                self.audit(caller, EventRecord { tenant: &tenant.name, action, question, outcome: &outcome, detail: &detail, ..EventRecord::default() })?;
                return Err(e);
            }
        };
        let cancelled = sink.cancelled();
        answer.timings.rewrite_ms = rewrite_ms;
        answer.timings.total_ms += rewrite_ms;
        let chunks = answer.served_chunks();
        let timings = serde_json::to_value(&answer.timings).map_err(|e| Error::Bug(format!("timings to JSON: {e}")))?;
        let evidence = serde_json::to_value(&answer.decision).map_err(|e| Error::Bug(format!("evidence to JSON: {e}")))?;
        let outcome_name = serde_json::to_value(answer.outcome).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
        let id = self.store.catalog().answers().record(&AnswerRecord {
            tenant: tenant.id,
            session,
            question,
            standalone,
            chunk_ids: &chunks,
            model: answer.model.as_deref().unwrap_or(""),
            refused: answer.refused,
            outcome: &outcome_name,
            answer: &answer.answer,
            evidence: &evidence,
            timings: &timings,
            asker: &caller.identity().unwrap_or_default(),
        })?;
        answer.answer_id = Some(id);
        let outcome = if cancelled {
            "cancelled"
        } else if answer.refused {
            "refused"
        } else {
            "ok"
        };
        let mut detail = serde_json::json!({ "answer_id": id, "session": session, "standalone": standalone, "written_by": answer.written_by });
        if let (Some(o), serde_json::Value::Object(w)) = (detail.as_object_mut(), access_detail(caller, Some(&retrieval))) {
            o.extend(w);
        }
        self.audit(
            caller,
            EventRecord {
                tenant: &tenant.name,
                action,
                question,
                chunk_ids: &chunks,
                model: answer.model.as_deref().unwrap_or(""),
                outcome,
                detail: &detail,
                ..EventRecord::default()
            },
        )?;
        Ok(Asked { retrieval, answer, note, warnings, cancelled })
    }

    /// The generator (`llm`, or the configured one), warning when it is remote.
    fn generator(&self, llm: Option<&str>, warnings: &mut Vec<String>) -> Result<Arc<dyn Generator>> {
        let g = self.app.generator(llm)?;
        if g.is_remote() {
            warnings.push(format!(
                "the question and the retrieved passages are sent to {}: this text leaves the machine",
                g.destination()
            ));
        }
        Ok(g)
    }

    /// Opens a chat session of `tenant`: continues `session` when given (it must be the
    /// tenant's), else starts one.
    pub fn open_session(&self, caller: &Caller, tenant: &str, session: Option<i64>) -> Result<(TenantRow, i64)> {
        let tenant = self.tenant(caller, tenant)?;
        let catalog = self.store.catalog();
        let id = match session {
            Some(id) => match catalog.sessions().tenant_of(id)? {
                Some(t) if t == tenant.id && Self::owns(caller, catalog.session_owners(tenant.id)?.get(&id)) => id,
                Some(_) if caller.is_local() => {
                    return Err(Error::Invalid(format!("session {id} belongs to another tenant; start a new chat without --session")))
                }
                None if caller.is_local() => {
                    return Err(Error::Invalid(format!("no session {id}; start a new chat without --session")))
                }
                _ => return Err(Error::NotFound(format!("no session {id} in this tenant"))),
            },
            None => {
                let id = catalog.sessions().create(tenant.id)?;
                if let Some(owner) = caller.identity() {
                    catalog.set_session_owner(tenant.id, id, &owner)?;
                }
                let detail = serde_json::json!({ "session": id });
                self.audit(caller, EventRecord { tenant: &tenant.name, action: "session_create", detail: &detail, ..EventRecord::default() })?;
                id
            }
        };
        Ok((tenant, id))
    }

    /// A session's turns, oldest first (the session must be the tenant's).
    pub fn session_turns(&self, caller: &Caller, tenant: &str, session: i64) -> Result<Vec<ragbox_core::store::TurnRow>> {
        let (_, id) = self.open_session(caller, tenant, Some(session))?;
        self.store.catalog().sessions().recent_turns(id, usize::MAX >> 1)
    }

    /// A tenant's sessions, newest first: (id, created ms, turns).
    pub fn sessions(&self, caller: &Caller, tenant: &str, limit: usize) -> Result<Vec<(i64, i64, usize)>> {
        let tenant = self.tenant(caller, tenant)?;
        let catalog = self.store.catalog();
        let mut sessions = catalog.sessions().list(tenant.id, usize::MAX >> 1)?;
        let owners = catalog.session_owners(tenant.id)?;
        sessions.retain(|(id, _, _)| Self::owns(caller, owners.get(id)));
        sessions.truncate(limit);
        Ok(sessions)
    }

    /// Resolves `question` against `session`'s earlier turns: a follow-up that refers back is
    /// rewritten (by the generator when it is needed), a self-contained one is kept as it is.
    pub fn resolve(&self, session: i64, question: &str, llm: Option<&str>) -> Result<Standalone> {
        let rows = self.store.catalog().sessions().recent_turns(session, 8)?;
        let prior: Vec<PriorTurn> =
            rows.iter().map(|t| PriorTurn { question: &t.question, standalone: &t.standalone, answer: &t.answer }).collect();
        self.resolve_with(&prior, question, llm)
    }

    /// [`Service::resolve`] over turns the caller holds (the OpenAI-compatible route's messages).
    pub fn resolve_with(&self, prior: &[PriorTurn<'_>], question: &str, llm: Option<&str>) -> Result<Standalone> {
        let max_turns = self.app.config.answer.memory_turns;
        if prior.is_empty() || ragbox_core::conversation::follow_up::refers_back(question).is_none() {
            block_on(standalone(question, prior, max_turns, None))
        } else {
            let generator = self.app.generator(llm)?;
            block_on(standalone(question, prior, max_turns, Some(generator.as_ref())))
        }
    }

    /// One chat turn: resolve the question against the session (`on_resolved` sees the
    /// standalone question before the answer streams), answer it, store the turn.
    #[allow(clippy::too_many_arguments)]
    pub fn chat_turn(
        &self,
        caller: &Caller,
        tenant: &TenantRow,
        session: i64,
        question: &str,
        o: &AskOptions,
        sink: &mut (dyn TokenSink + Send),
        on_resolved: &mut dyn FnMut(&Standalone),
    ) -> Result<(ChatTurn, Asked)> {
        if question.trim().is_empty() {
            return Err(Error::Invalid("the question is empty; type what you want to know".into()));
        }
        let resolved = self.resolve(session, question, o.llm.as_deref())?;
        on_resolved(&resolved);
        let asked = self.answer(caller, tenant, question, &resolved.question, resolved.rewrite_ms, Some(session), o, "chat", sink)?;
        let turn = self.store.catalog().sessions().add_turn(session, question, &resolved.question, &asked.answer.answer, asked.answer.answer_id)?;
        Ok((ChatTurn { session, turn, follow_up: resolved, answer: asked.answer.clone() }, asked))
    }

    /// An answer given to a conversation held by the client (OpenAI-compatible route): the last
    /// question resolved against the earlier (question, answer) pairs, then answered.
    pub fn ask_in_conversation(
        &self,
        caller: &Caller,
        tenant: &str,
        earlier: &[(String, String)],
        question: &str,
        o: &AskOptions,
        sink: &mut (dyn TokenSink + Send),
    ) -> Result<Asked> {
        if question.trim().is_empty() {
            return Err(Error::Invalid("the last user message is empty".into()));
        }
        let tenant = self.tenant(caller, tenant)?;
        let prior: Vec<PriorTurn> = earlier.iter().map(|(q, a)| PriorTurn { question: q, standalone: q, answer: a }).collect();
        let resolved = self.resolve_with(&prior, question, o.llm.as_deref())?;
        self.answer(caller, &tenant, question, &resolved.question, resolved.rewrite_ms, None, o, "chat_completion", sink)
    }
}

/// The audit's note of what granted the passages served (`granted_by`: the asker's groups that
/// the restricted documents among them are open to) and of chunks the catalog check withheld.
fn access_detail(caller: &Caller, retrieval: Option<&Retrieval>) -> serde_json::Value {
    let mut detail = serde_json::Map::new();
    if let Some(r) = retrieval {
        if !caller.audience.is_everyone() {
            let mut granted: Vec<String> = r.hits.iter().flat_map(|h| caller.audience.granting(&h.chunk.readers)).collect();
            granted.sort();
            granted.dedup();
            detail.insert("granted_by".into(), serde_json::json!(granted));
        }
        if !r.withheld.is_empty() {
            detail.insert("withheld".into(), serde_json::json!(r.withheld));
        }
    }
    serde_json::Value::Object(detail)
}
