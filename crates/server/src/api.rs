//! The `/v1` JSON routes (tenants, search, ask, chat, feedback, documents, jobs, admin) and the
//! probes (`/healthz`, `/readyz`, `/metrics`). Each handler checks its input, then makes one
//! service call; answers stream as server-sent events.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{FromRequest, Multipart, Path, Query, Request, State as Extract};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use tokio::sync::mpsc;

use ragbox_service::{Answer, AskOptions, Asked, Caller, EventFilter, KeyRole, Rating, SearchOptions, Service, TokenSink};

use super::auth::Authed;
use super::quota::Counted;
use super::error::rejection;
use super::{ApiError, State};

/// A JSON body whose every rejection (syntax, types, unknown fields, size, content type) is an
/// [`ApiError`].
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned + Send> FromRequest<State> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &State) -> Result<Self, ApiError> {
        let limit = state.config.max_body_bytes;
        let (parts, body) = req.into_parts();
        let bytes = read_body(body, limit, state.config.body_timeout_ms).await?;
        let req = Request::from_parts(parts, axum::body::Body::from(bytes));
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(ApiJson(v)),
            Err(r) => Err(rejection(r.status(), r.body_text(), limit)),
        }
    }
}

/// How much of an oversized body is still read (and dropped) before the 413, so that a client
/// that writes its whole body before reading sees the answer instead of a reset connection.
const DRAIN_BYTES: usize = 1 << 20;

/// Reads a body of at most `limit` bytes within `timeout_ms` (else 408). A longer one is read on
/// (up to [`DRAIN_BYTES`] more) and refused with 413 naming the limit.
async fn read_body(body: axum::body::Body, limit: usize, timeout_ms: u64) -> Result<axum::body::Bytes, ApiError> {
    use futures::StreamExt;
    let mut stream = body.into_data_stream();
    let mut buf = Vec::new();
    let mut total = 0usize;
    let read = async {
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| ApiError::invalid(format!("the request body could not be read: {e}")))?;
            total = total.saturating_add(chunk.len());
            if total <= limit {
                buf.extend_from_slice(&chunk);
            } else if total > limit.saturating_add(DRAIN_BYTES) {
                break;
            }
        }
        Ok::<(), ApiError>(())
    };
    tokio::time::timeout(Duration::from_millis(timeout_ms), read).await.map_err(|_| ApiError::slow_body(timeout_ms))??;
    if total > limit {
        return Err(ApiError::too_large("the request body", format!("{limit} bytes")));
    }
    Ok(buf.into())
}

/// Path parameters whose rejection (a non-numeric id) is an [`ApiError`].
pub struct ApiPath<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> axum::extract::FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, ApiError> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(v)) => Ok(ApiPath(v)),
            Err(r) => Err(rejection(r.status(), r.body_text(), 0)),
        }
    }
}

/// Checks a question or query: not empty, not longer than the limit.
fn check_question(state: &State, what: &str, text: &str) -> Result<(), ApiError> {
    if text.trim().is_empty() {
        return Err(ApiError::invalid(format!("the {what} is empty; send what you want to know")));
    }
    let chars = text.chars().count();
    let limit = state.config.max_question_chars;
    if chars > limit {
        return Err(ApiError::too_large(&format!("the {what} ({chars} characters)"), format!("{limit} characters (server.max_question_chars)")));
    }
    Ok(())
}

/// Any route that does not exist.
pub async fn not_found() -> ApiError {
    ApiError::not_found("no such route; docs/API.md lists them")
}

/// Liveness: the process answers.
pub async fn healthz() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "status": "ok" }))
}

/// Readiness: models loaded, store open.
pub async fn readyz(Extract(state): Extract<State>) -> Response {
    let service = state.service.clone();
    match tokio::task::spawn_blocking(move || service.health()).await {
        Ok(h) if h.ready && !state.stopping.load(Ordering::SeqCst) => (StatusCode::OK, Json(serde_json::json!({ "status": "ready", "health": h }))).into_response(),
        Ok(h) => (StatusCode::SERVICE_UNAVAILABLE, Json(serde_json::json!({ "status": "not_ready", "health": h }))).into_response(),
        Err(e) => ApiError::internal(e.to_string()).into_response(),
    }
}

/// Prometheus text.
pub async fn metrics(Extract(state): Extract<State>) -> Response {
    let sources = state.service.sources(&ragbox_service::Caller::local()).unwrap_or_default();
    let text = state.metrics.render(state.queue.depth(), state.service.ingest_progress(), &sources);
    ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

/// `GET /v1/tenants`: the tenants this key reaches.
pub async fn tenants(Extract(state): Extract<State>, Authed(caller): Authed) -> Result<Json<serde_json::Value>, ApiError> {
    let tenants = state.blocking(move |s| s.tenants(&caller)).await?;
    Ok(Json(serde_json::json!({ "tenants": tenants })))
}

/// `POST /v1/tenants/{tenant}/search`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchBody {
    /// What to look for.
    pub query: String,
    /// Passages to return.
    pub k: Option<usize>,
    /// Every candidate's view of every stage.
    #[serde(default)]
    pub explain: bool,
    /// Skip the reranker.
    #[serde(default)]
    pub no_rerank: bool,
}

pub async fn search(
    Extract(state): Extract<State>,
    Authed(caller): Authed,
    ApiPath(tenant): ApiPath<String>,
    ApiJson(body): ApiJson<SearchBody>,
) -> Result<Json<serde_json::Value>, ApiError> {
    check_question(&state, "query", &body.query)?;
    if body.k == Some(0) || body.k.is_some_and(|k| k > 100) {
        return Err(ApiError::invalid("k must be between 1 and 100"));
    }
    state.charge(&caller, &tenant, Counted::Question).await?;
    let options = SearchOptions { k: body.k, model: None, no_rerank: body.no_rerank };
    let explain = body.explain;
    let mut found = state.blocking(move |s| s.search(&caller, &tenant, &body.query, &options)).await?;
    if !explain {
        found.retrieval.candidates.clear();
    }
    Ok(Json(serde_json::json!({ "retrieval": found.retrieval, "note": found.note })))
}

/// `POST /v1/tenants/{tenant}/ask`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AskBody {
    /// The question.
    pub question: String,
    /// Skip the reranker.
    #[serde(default)]
    pub no_rerank: bool,
}

/// What the answering task sends to the event stream.
pub(super) enum Streamed {
    /// One server-sent event.
    Event(Event),
    /// The whole result, for a route that does not stream (ignored by event streams).
    Done(Result<serde_json::Value, ApiError>),
}

/// How a token becomes an event.
pub(super) type TokenFormat = Box<dyn Fn(&str) -> Option<Event> + Send + Sync>;

/// ragbox's own token events: `event: token`, `data: {"text": "..."}`.
pub(super) fn token_event() -> TokenFormat {
    Box::new(|text| Event::default().event("token").json_data(serde_json::json!({ "text": text })).ok())
}

/// Tokens into the event stream; cancelled when the client has gone, the deadline passed or
/// the server is stopping.
struct ChannelSink {
    tx: mpsc::UnboundedSender<Streamed>,
    deadline: Instant,
    state: State,
    format: TokenFormat,
}

impl TokenSink for ChannelSink {
    fn token(&mut self, text: &str) {
        if let Some(e) = (self.format)(text) {
            let _ = self.tx.send(Streamed::Event(e));
        }
    }

    fn cancelled(&self) -> bool {
        self.tx.is_closed() || Instant::now() > self.deadline || self.state.stopping.load(Ordering::SeqCst)
    }
}

pub(super) fn error_event(e: &ApiError) -> Event {
    Event::default().event("error").json_data(e.body()).unwrap_or_else(|_| Event::default().event("error"))
}

/// The final event's payload: the answer with what a client shows.
fn answer_payload(answer: &Answer) -> serde_json::Value {
    serde_json::json!({
        "answer_id": answer.answer_id,
        "question": answer.question,
        "standalone": answer.standalone,
        "answer": answer.answer,
        "citations": answer.citations,
        "invalid_citations": answer.invalid_citations,
        "sentences": answer.sentences,
        "refused": answer.refused,
        "refusal": answer.refusal,
        "outcome": answer.outcome,
        "decision": answer.decision,
        "verdict": answer.verdict,
        "closest": answer.closest,
        "sources": answer.sources,
        "model": answer.model,
        "written_by": answer.written_by,
        "support_method": answer.support_method,
        "timings": answer.timings,
        "hit_token_cap": answer.hit_token_cap,
        "cut_mid_sentence": answer.cut_mid_sentence,
    })
}

/// A stream of events from `rx`.
pub(super) fn event_stream(rx: mpsc::UnboundedReceiver<Streamed>) -> Sse<impl futures::Stream<Item = Result<Event, Infallible>>> {
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        loop {
            match rx.recv().await {
                Some(Streamed::Event(e)) => return Some((Ok(e), rx)),
                Some(Streamed::Done(_)) => continue,
                None => return None,
            }
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

/// Admits an answer to the queue, then runs `work` on a blocking thread once a generation slot
/// is free, streaming its tokens; `finish` turns the result into the final events.
pub(super) fn generate<T: Send + 'static>(
    state: &State,
    format: TokenFormat,
    work: impl FnOnce(&Arc<Service>, &mut ChannelSinkHandle) -> ragbox_service::Result<T> + Send + 'static,
    finish: impl FnOnce(&State, Result<T, ApiError>) -> Vec<Streamed> + Send + 'static,
) -> Result<mpsc::UnboundedReceiver<Streamed>, ApiError> {
    let Some(ticket) = state.queue.admit() else {
        state.metrics.generation("rejected", 0, 0.0);
        let (waiting, running) = state.queue.depth();
        return Err(ApiError::busy(
            format!("the answer queue is full ({running} generating, {waiting} waiting; server.queue = {}); try again shortly", state.config.queue),
            5,
        ));
    };
    let (tx, rx) = mpsc::unbounded_channel();
    let state = state.clone();
    tokio::spawn(async move {
        let _ticket = ticket;
        let deadline = Instant::now() + Duration::from_millis(state.config.generate_timeout_ms);
        let slot = tokio::select! {
            slot = state.queue.slot() => slot,
            _ = tx.closed() => {
                state.metrics.generation("cancelled", 0, 0.0);
                return;
            }
            _ = tokio::time::sleep_until(deadline.into()) => {
                for e in finish(&state, Err(ApiError::busy("waited too long for the LLM (server.generate_timeout_ms)", 5))) {
                    let _ = tx.send(e);
                }
                return;
            }
        };
        let sink_state = state.clone();
        let service = state.service.clone();
        let sink_tx = tx.clone();
        let result = tokio::task::spawn_blocking(move || {
            let mut sink = ChannelSinkHandle(ChannelSink { tx: sink_tx, deadline, state: sink_state, format });
            work(&service, &mut sink)
        })
        .await;
        drop(slot);
        let result = match result {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => {
                state.metrics.generation("error", 0, 0.0);
                Err(ApiError::from(e))
            }
            Err(join) => {
                state.metrics.generation("error", 0, 0.0);
                Err(ApiError::internal(format!("the answer's worker failed: {join}")))
            }
        };
        for e in finish(&state, result) {
            let _ = tx.send(e);
        }
    });
    Ok(rx)
}

/// The sink handed to generation work (a newtype so `generate`'s signature stays private).
pub struct ChannelSinkHandle(ChannelSink);

impl TokenSink for ChannelSinkHandle {
    fn token(&mut self, text: &str) {
        self.0.token(text)
    }
    fn cancelled(&self) -> bool {
        self.0.cancelled()
    }
}

impl ChannelSinkHandle {
    /// Something that sends events besides the tokens (chat: the resolved question).
    pub fn sender(&self) -> impl Fn(Event) + Send + 'static {
        let tx = self.0.tx.clone();
        move |e| {
            let _ = tx.send(Streamed::Event(e));
        }
    }
}

/// Counts a finished answer in the metrics.
pub(super) fn count(state: &State, asked: &Asked) {
    let outcome = if asked.cancelled {
        "cancelled"
    } else if asked.answer.refused {
        "refused"
    } else {
        "ok"
    };
    state.metrics.generation(outcome, asked.answer.timings.completion_tokens, asked.answer.timings.tokens_per_second);
}

/// Checks the tenant is in scope before a stream starts, so a wrong tenant is a plain 404.
pub(super) async fn require_tenant(state: &State, caller: &Caller, tenant: &str) -> Result<(), ApiError> {
    let (caller, tenant) = (caller.clone(), tenant.to_string());
    state.blocking(move |s| s.tenant(&caller, &tenant).map(|_| ())).await
}

pub async fn ask(
    Extract(state): Extract<State>,
    Authed(caller): Authed,
    ApiPath(tenant): ApiPath<String>,
    ApiJson(body): ApiJson<AskBody>,
) -> Result<Response, ApiError> {
    check_question(&state, "question", &body.question)?;
    require_tenant(&state, &caller, &tenant).await?;
    state.charge(&caller, &tenant, Counted::Question).await?;
    let options = AskOptions { llm: None, no_rerank: body.no_rerank };
    let rx = generate(
        &state,
        token_event(),
        move |s, sink| s.ask(&caller, &tenant, &body.question, &options, sink),
        |state, asked: Result<Asked, ApiError>| {
            let asked = match asked {
                Ok(a) => a,
                Err(e) => return vec![Streamed::Event(error_event(&e))],
            };
            count(state, &asked);
            let mut payload = answer_payload(&asked.answer);
            payload["note"] = serde_json::json!(asked.note);
            payload["cancelled"] = serde_json::json!(asked.cancelled);
            vec![Streamed::Event(Event::default().event("answer").json_data(payload).unwrap_or_default())]
        },
    )?;
    Ok(event_stream(rx).into_response())
}

/// `POST /v1/tenants/{tenant}/chat/sessions`: a new session.
pub async fn create_session(Extract(state): Extract<State>, Authed(caller): Authed, ApiPath(tenant): ApiPath<String>) -> Result<Response, ApiError> {
    let (_, id) = state.blocking(move |s| s.open_session(&caller, &tenant, None)).await?;
    Ok((StatusCode::CREATED, Json(serde_json::json!({ "session": id }))).into_response())
}

/// `GET /v1/tenants/{tenant}/chat/sessions`.
pub async fn list_sessions(Extract(state): Extract<State>, Authed(caller): Authed, ApiPath(tenant): ApiPath<String>) -> Result<Json<serde_json::Value>, ApiError> {
    let rows = state.blocking(move |s| s.sessions(&caller, &tenant, 100)).await?;
    let sessions: Vec<_> = rows.iter().map(|(id, created_ms, turns)| serde_json::json!({ "session": id, "created_ms": created_ms, "turns": turns })).collect();
    Ok(Json(serde_json::json!({ "sessions": sessions })))
}

/// `GET /v1/tenants/{tenant}/chat/sessions/{session}`.
pub async fn read_session(
    Extract(state): Extract<State>,
    Authed(caller): Authed,
    ApiPath((tenant, session)): ApiPath<(String, i64)>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let turns = state.blocking(move |s| s.session_turns(&caller, &tenant, session)).await?;
    Ok(Json(serde_json::json!({ "session": session, "turns": turns })))
}

/// `POST /v1/tenants/{tenant}/chat/sessions/{session}/messages`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatBody {
    /// The next question.
    pub question: String,
    /// Skip the reranker.
    #[serde(default)]
    pub no_rerank: bool,
}

pub async fn chat_message(
    Extract(state): Extract<State>,
    Authed(caller): Authed,
    ApiPath((tenant, session)): ApiPath<(String, i64)>,
    ApiJson(body): ApiJson<ChatBody>,
) -> Result<Response, ApiError> {
    check_question(&state, "question", &body.question)?;
    let (c, t) = (caller.clone(), tenant.clone());
    let (tenant_row, session) = state.blocking(move |s| s.open_session(&c, &t, Some(session))).await?;
    state.charge(&caller, &tenant, Counted::Question).await?;
    let options = AskOptions { llm: None, no_rerank: body.no_rerank };
    let rx = generate(
        &state,
        token_event(),
        move |s, sink| {
            // The standalone question goes out before the tokens.
            let send = sink.sender();
            let mut on_resolved = |r: &ragbox_service::Standalone| {
                if let Ok(e) = Event::default().event("follow_up").json_data(r) {
                    send(e);
                }
            };
            s.chat_turn(&caller, &tenant_row, session, &body.question, &options, sink, &mut on_resolved)
        },
        |state, result: Result<(ragbox_service::ChatTurn, Asked), ApiError>| {
            let (turn, asked) = match result {
                Ok(r) => r,
                Err(e) => return vec![Streamed::Event(error_event(&e))],
            };
            count(state, &asked);
            let mut payload = answer_payload(&asked.answer);
            payload["session"] = serde_json::json!(turn.session);
            payload["turn"] = serde_json::json!(turn.turn);
            payload["follow_up"] = serde_json::json!(turn.follow_up);
            payload["cancelled"] = serde_json::json!(asked.cancelled);
            vec![Streamed::Event(Event::default().event("answer").json_data(payload).unwrap_or_default())]
        },
    )?;
    Ok(event_stream(rx).into_response())
}

/// `POST /v1/tenants/{tenant}/feedback`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeedbackBody {
    /// The answer rated (`answer_id` of the answer event).
    pub answer_id: i64,
    /// `up` or `down`.
    pub rating: String,
    /// Why.
    pub comment: Option<String>,
}

pub async fn feedback(
    Extract(state): Extract<State>,
    Authed(caller): Authed,
    ApiPath(tenant): ApiPath<String>,
    ApiJson(body): ApiJson<FeedbackBody>,
) -> Result<Response, ApiError> {
    let rating: Rating = body.rating.parse().map_err(ApiError::from)?;
    if body.comment.as_ref().is_some_and(|c| c.chars().count() > state.config.max_question_chars) {
        return Err(ApiError::too_large("the comment", format!("{} characters", state.config.max_question_chars)));
    }
    let answer_id = body.answer_id;
    let id = state.blocking(move |s| s.feedback(&caller, Some(&tenant), answer_id, rating, body.comment.as_deref())).await?;
    Ok((StatusCode::CREATED, Json(serde_json::json!({ "feedback_id": id, "answer_id": answer_id, "rating": rating }))).into_response())
}

/// `GET /v1/tenants/{tenant}/documents`.
pub async fn list_documents(Extract(state): Extract<State>, Authed(caller): Authed, ApiPath(tenant): ApiPath<String>) -> Result<Json<serde_json::Value>, ApiError> {
    let (tenant, docs) = state.blocking(move |s| s.documents(&caller, &tenant)).await?;
    Ok(Json(serde_json::json!({ "tenant": tenant, "documents": docs })))
}

/// `POST /v1/tenants/{tenant}/documents`: multipart, one part named `file` with a file name.
pub async fn upload(
    Extract(state): Extract<State>,
    Authed(caller): Authed,
    ApiPath(tenant): ApiPath<String>,
    multipart: Result<Multipart, axum::extract::multipart::MultipartRejection>,
) -> Result<Response, ApiError> {
    caller.scope(&tenant).map_err(ApiError::from)?;
    caller.require(KeyRole::Writer, "uploading documents").map_err(ApiError::from)?;
    state.charge(&caller, &tenant, Counted::Upload).await?;
    let limit = state.config.max_upload_bytes;
    let mut multipart = multipart.map_err(|r| rejection(r.status(), r.body_text(), limit))?;
    let read = async {
        loop {
            let field = match multipart.next_field().await {
                Ok(Some(f)) => f,
                Ok(None) => return Ok(None),
                Err(e) => return Err(multipart_error(e, limit)),
            };
            if field.name() != Some("file") {
                continue;
            }
            let name = field.file_name().map(str::to_string).ok_or_else(|| ApiError::invalid("the `file` part has no file name"))?;
            let bytes = field.bytes().await.map_err(|e| multipart_error(e, limit))?;
            if bytes.len() > limit {
                return Err(ApiError::too_large(&format!("the upload ({} bytes)", bytes.len()), format!("{limit} bytes (server.max_upload_bytes)")));
            }
            return Ok(Some((name, bytes)));
        }
    };
    let timeout_ms = state.config.body_timeout_ms;
    let file = tokio::time::timeout(Duration::from_millis(timeout_ms), read).await.map_err(|_| ApiError::slow_body(timeout_ms))??;
    let (name, bytes) = file.ok_or_else(|| ApiError::invalid("send the document as a multipart part named `file`"))?;
    ragbox_service::check_upload_name(&name).map_err(ApiError::from)?;
    let job = state.blocking(move |s| s.upload(&caller, &tenant, &name, &bytes)).await?;
    Ok((StatusCode::ACCEPTED, Json(serde_json::json!({ "job": job }))).into_response())
}

fn multipart_error(e: axum::extract::multipart::MultipartError, limit: usize) -> ApiError {
    let status = e.status();
    if status == StatusCode::PAYLOAD_TOO_LARGE {
        return ApiError::too_large("the upload", format!("{limit} bytes (server.max_upload_bytes)"));
    }
    rejection(if status.is_client_error() { status } else { StatusCode::BAD_REQUEST }, format!("malformed multipart body: {}", e.body_text()), limit)
}

/// `DELETE /v1/tenants/{tenant}/documents/{doc}`.
pub async fn remove_document(
    Extract(state): Extract<State>,
    Authed(caller): Authed,
    ApiPath((tenant, doc)): ApiPath<(String, u64)>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let removed = state.blocking(move |s| s.remove_document(&caller, &tenant, doc)).await?;
    Ok(Json(serde_json::json!({ "removed": removed.to_string_lossy() })))
}

/// `GET /v1/tenants/{tenant}/documents/{doc}/text`: the document's text as ingest parsed it
/// (chunk spans are byte offsets into it).
pub async fn document_text(
    Extract(state): Extract<State>,
    Authed(caller): Authed,
    ApiPath((tenant, doc)): ApiPath<(String, u64)>,
) -> Result<Json<ragbox_service::DocumentText>, ApiError> {
    Ok(Json(state.blocking(move |s| s.document_text(&caller, &tenant, doc)).await?))
}

/// `POST /v1/tenants/{tenant}/documents/{doc}/reingest`.
pub async fn reingest(Extract(state): Extract<State>, Authed(caller): Authed, ApiPath((tenant, doc)): ApiPath<(String, u64)>) -> Result<Response, ApiError> {
    let job = state.blocking(move |s| s.reingest(&caller, &tenant, doc)).await?;
    Ok((StatusCode::ACCEPTED, Json(serde_json::json!({ "job": job }))).into_response())
}

/// `GET /v1/tenants/{tenant}/jobs/{job}`.
pub async fn job(Extract(state): Extract<State>, Authed(caller): Authed, ApiPath((tenant, job)): ApiPath<(String, u64)>) -> Result<Json<serde_json::Value>, ApiError> {
    let job = state.blocking(move |s| s.job(&caller, &tenant, job)).await?;
    Ok(Json(serde_json::json!({ "job": job })))
}

/// `GET /v1/admin/audit?tenant=&since_ms=&person=&limit=`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    tenant: Option<String>,
    since_ms: Option<i64>,
    person: Option<String>,
    limit: Option<usize>,
}

pub async fn audit(
    Extract(state): Extract<State>,
    Authed(caller): Authed,
    query: Result<Query<AuditQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let Query(q) = query.map_err(|r| rejection(r.status(), r.body_text(), 0))?;
    let filter = EventFilter { tenant: q.tenant, since_ms: q.since_ms, person: q.person, limit: q.limit.unwrap_or(1000) };
    let rows = state.blocking(move |s| s.audit_events(&caller, &filter)).await?;
    Ok(Json(serde_json::json!({ "events": rows })))
}

/// The query of the export routes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportQuery {
    /// The tenant (the admin route's; the person's route names it in its path).
    tenant: Option<String>,
    /// One person's (the admin route's): subject, identity, or key.
    person: Option<String>,
    /// Only rows from this time on, ms since the epoch.
    since_ms: Option<i64>,
}

/// JSON lines of an export, as a download.
async fn export_response(state: &State, caller: Caller, request: ragbox_service::ExportRequest) -> Result<Response, ApiError> {
    let file = format!("ragbox-export-{}.jsonl", request.tenant);
    let body = state
        .blocking(move |s| {
            let mut lines = Vec::new();
            s.export(&caller, &request, &mut |record| {
                lines.extend(serde_json::to_vec(record).map_err(|e| ragbox_service::Error::Bug(format!("export line: {e}")))?);
                lines.push(b'\n');
                Ok(())
            })?;
            Ok(lines)
        })
        .await?;
    let headers = [
        (axum::http::header::CONTENT_TYPE, "application/x-ndjson".to_string()),
        (axum::http::header::CONTENT_DISPOSITION, format!("attachment; filename=\"{file}\"")),
    ];
    Ok((headers, body).into_response())
}

/// `GET /v1/admin/export?tenant=T[&person=P][&since_ms=N]`: a tenant's conversations, or one
/// person's, as JSON lines (admin keys only).
pub async fn admin_export(
    Extract(state): Extract<State>,
    Authed(caller): Authed,
    query: Result<Query<ExportQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query.map_err(|r| rejection(r.status(), r.body_text(), 0))?;
    caller.require(KeyRole::Admin, "exporting conversations from the admin route").map_err(ApiError::from)?;
    let tenant = q.tenant.ok_or_else(|| ApiError::invalid("name the tenant: ?tenant=NAME"))?;
    let whose = q.person.map_or(ragbox_service::Whose::Everyone, ragbox_service::Whose::Person);
    export_response(&state, caller, ragbox_service::ExportRequest { tenant, whose, since_ms: q.since_ms }).await
}

/// `GET /v1/tenants/{tenant}/export[?since_ms=N]`: the caller's own conversations in the tenant
/// (a person's, or a key's), as JSON lines.
pub async fn my_export(
    Extract(state): Extract<State>,
    Authed(caller): Authed,
    ApiPath(tenant): ApiPath<String>,
    query: Result<Query<ExportQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query.map_err(|r| rejection(r.status(), r.body_text(), 0))?;
    if q.tenant.is_some() || q.person.is_some() {
        return Err(ApiError::invalid("this route exports your own conversations; an admin exports others' from /v1/admin/export"));
    }
    export_response(&state, caller, ragbox_service::ExportRequest { tenant, whose: ragbox_service::Whose::Mine, since_ms: q.since_ms }).await
}

/// `GET /v1/admin/audit/verify`.
pub async fn audit_verify(Extract(state): Extract<State>, Authed(caller): Authed) -> Result<Json<serde_json::Value>, ApiError> {
    let report = state.blocking(move |s| s.verify_audit(&caller)).await?;
    Ok(Json(serde_json::json!({ "intact": report.broken.is_none(), "report": report })))
}

/// `GET /v1/admin/doctor`: `ragbox doctor --json` (build, device, models verified, each
/// tenant's generations and consistency, the server settings).
pub async fn doctor(Extract(state): Extract<State>, Authed(caller): Authed) -> Result<Json<ragbox_service::DoctorReport>, ApiError> {
    Ok(Json(state.blocking(move |s| s.doctor(&caller)).await?))
}

/// `GET /v1/admin/sources`: every `[[sources]]` entry, what it is doing, how its last sync ended.
pub async fn sources(Extract(state): Extract<State>, Authed(caller): Authed) -> Result<Json<serde_json::Value>, ApiError> {
    let sources = state.blocking(move |s| s.sources(&caller)).await?;
    Ok(Json(serde_json::json!({ "sources": sources })))
}

/// `POST /v1/admin/sources/{name}/sync`: the source synced now by the server's schedule (202;
/// `GET /v1/admin/sources` shows it running, then its result).
pub async fn sync_source(
    Extract(state): Extract<State>,
    Authed(caller): Authed,
    Path(name): Path<String>,
) -> Result<(StatusCode, Json<ragbox_service::SourceStatus>), ApiError> {
    let status = state.blocking(move |s| s.request_sync(&caller, &name)).await?;
    Ok((StatusCode::ACCEPTED, Json(status)))
}

/// `GET /v1/admin/keys`.
pub async fn list_keys(Extract(state): Extract<State>, Authed(caller): Authed) -> Result<Json<serde_json::Value>, ApiError> {
    let keys = state.blocking(move |s| s.keys(&caller)).await?;
    Ok(Json(serde_json::json!({ "keys": keys })))
}

/// `POST /v1/admin/keys`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyBody {
    name: String,
    tenant: Option<String>,
    role: String,
    #[serde(default)]
    groups: Vec<String>,
}

pub async fn create_key(Extract(state): Extract<State>, Authed(caller): Authed, ApiJson(body): ApiJson<KeyBody>) -> Result<Response, ApiError> {
    let role: KeyRole = body.role.parse().map_err(ApiError::from)?;
    let (row, secret) = state.blocking(move |s| s.create_key(&caller, &body.name, body.tenant.as_deref(), role, &body.groups)).await?;
    Ok((StatusCode::CREATED, Json(serde_json::json!({ "key": row, "secret": secret }))).into_response())
}

/// `DELETE /v1/admin/keys/{key}`.
pub async fn revoke_key(Extract(state): Extract<State>, Authed(caller): Authed, ApiPath(id): ApiPath<i64>) -> Result<Json<serde_json::Value>, ApiError> {
    let row = state.blocking(move |s| s.revoke_key(&caller, id)).await?;
    Ok(Json(serde_json::json!({ "key": row })))
}
