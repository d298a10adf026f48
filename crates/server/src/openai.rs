//! OpenAI-compatible routes, so existing clients can talk to ragbox: `GET /v1/models` lists one
//! model per tenant the key reaches (`ragbox/<tenant>`; plain `ragbox` is the key's own tenant),
//! and `POST /v1/chat/completions` answers the last user message from that tenant, the earlier
//! user/assistant pairs serving as the conversation a follow-up may refer back to. The answer
//! text carries its `[n]` citations; the sources, citations, answer id and refusal ride in an
//! extra `ragbox` field (of the response, or of the last chunk when streaming). Unknown request
//! fields (temperature, top_p, ...) are accepted and ignored: clients send them by default.
//!
//! `POST /v1/embeddings` gives other tools the verified local embedder: `model` is `ragbox` or
//! `ragbox/<tenant>` (the tenant's own embedder, so the vectors compare with its index) or an
//! embedding model's name (`all-minilm-l6-v2`); `input` a string or a list of strings;
//! `encoding_format` `float` (the default) or `base64` (little-endian f32, what the Python client
//! asks for); `input_type` `query` or `passage` (also `document`, `search_query`,
//! `search_document`; the default is `passage`), which matters for models with instructions.

use axum::extract::State as Extract;
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;

use base64::Engine as _;

use ragbox_service::{AskOptions, Asked, Caller, EmbedWith, TextKind};

use super::api::{count, event_stream, generate, require_tenant, ApiJson, Streamed};
use super::auth::Authed;
use super::{ApiError, State};

/// Message content: a string or a list of parts (only text parts are read).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// Parts.
    Parts(Vec<Part>),
}

/// One content part.
#[derive(Debug, Deserialize)]
pub struct Part {
    /// `text` (others ignored).
    #[serde(rename = "type")]
    pub kind: String,
    /// The text.
    pub text: Option<String>,
}

impl Content {
    fn text(&self) -> String {
        match self {
            Content::Text(t) => t.clone(),
            Content::Parts(p) => p.iter().filter(|p| p.kind == "text").filter_map(|p| p.text.clone()).collect::<Vec<_>>().join("\n"),
        }
    }
}

/// One message.
#[derive(Debug, Deserialize)]
pub struct InMessage {
    /// system, user, assistant (others ignored).
    pub role: String,
    /// Its text.
    pub content: Option<Content>,
}

/// The request (fields ragbox does not use are ignored).
#[derive(Debug, Deserialize)]
pub struct CompletionBody {
    /// `ragbox` or `ragbox/<tenant>`.
    pub model: String,
    /// The conversation.
    pub messages: Vec<InMessage>,
    /// Stream chunks as server-sent events.
    #[serde(default)]
    pub stream: bool,
}

fn now_s() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// The tenant a model name means for `caller`.
fn tenant_of(model: &str, caller: &Caller) -> Result<String, ApiError> {
    match model.strip_prefix("ragbox/") {
        Some(t) if !t.is_empty() => Ok(t.to_string()),
        _ if model == "ragbox" => caller
            .tenant
            .clone()
            .ok_or_else(|| ApiError::invalid("this key reaches every tenant: name one as model `ragbox/<tenant>` (GET /v1/models lists them)")),
        _ => Err(ApiError::not_found(format!("no model `{model}`; GET /v1/models lists them"))),
    }
}

/// `GET /v1/models`.
pub async fn models(Extract(state): Extract<State>, Authed(caller): Authed) -> Result<Json<serde_json::Value>, ApiError> {
    let own = caller.tenant.is_some();
    let tenants = state.blocking(move |s| s.tenants(&caller)).await?;
    let mut data: Vec<serde_json::Value> = tenants
        .iter()
        .map(|t| serde_json::json!({ "id": format!("ragbox/{}", t.name), "object": "model", "created": 0, "owned_by": "ragbox" }))
        .collect();
    if own {
        data.insert(0, serde_json::json!({ "id": "ragbox", "object": "model", "created": 0, "owned_by": "ragbox" }));
    }
    Ok(Json(serde_json::json!({ "object": "list", "data": data })))
}

/// The extra field: what the answer rests on.
fn extra(asked: &Asked) -> serde_json::Value {
    let a = &asked.answer;
    serde_json::json!({
        "answer_id": a.answer_id,
        "refused": a.refused,
        "refusal": a.refusal,
        "outcome": a.outcome,
        "decision": a.decision,
        "citations": a.citations,
        "sources": a.sources,
        "closest": a.closest,
        "sentences": a.sentences,
        "standalone": a.standalone,
        "timings": a.timings,
    })
}

/// `POST /v1/chat/completions`.
pub async fn chat_completions(Extract(state): Extract<State>, Authed(caller): Authed, ApiJson(body): ApiJson<CompletionBody>) -> Result<Response, ApiError> {
    let tenant = tenant_of(&body.model, &caller)?;
    state.charge(&caller, &tenant, crate::quota::Counted::Question).await?;
    let mut turns: Vec<(String, String)> = Vec::new();
    let mut question = None;
    let mut pending: Option<String> = None;
    for m in &body.messages {
        let text = m.content.as_ref().map(Content::text).unwrap_or_default();
        match m.role.as_str() {
            "user" => {
                if let Some(q) = pending.take() {
                    turns.push((q, String::new()));
                }
                pending = Some(text);
            }
            "assistant" => {
                if let Some(q) = pending.take() {
                    turns.push((q, text));
                }
            }
            _ => {}
        }
    }
    if let Some(q) = pending.take() {
        question = Some(q);
    }
    let question = question.ok_or_else(|| ApiError::invalid("the last message must be the user's question"))?;
    if question.trim().is_empty() {
        return Err(ApiError::invalid("the question (last user message) is empty"));
    }
    let chars = question.chars().count();
    if chars > state.config.max_question_chars {
        return Err(ApiError::too_large(&format!("the question ({chars} characters)"), format!("{} characters", state.config.max_question_chars)));
    }
    require_tenant(&state, &caller, &tenant).await?;
    let model = body.model.clone();
    let id = format!("chatcmpl-{}", now_s());
    let created = now_s();
    let options = AskOptions::default();
    let work = {
        let tenant = tenant.clone();
        move |s: &std::sync::Arc<ragbox_service::Service>, sink: &mut super::api::ChannelSinkHandle| {
            s.ask_in_conversation(&caller, &tenant, &turns, &question, &options, sink)
        }
    };
    if body.stream {
        let (chunk_id, chunk_model) = (id.clone(), model.clone());
        let chunk = move |delta: serde_json::Value, finish: Option<&str>| {
            serde_json::json!({
                "id": chunk_id, "object": "chat.completion.chunk", "created": created, "model": chunk_model,
                "choices": [{ "index": 0, "delta": delta, "finish_reason": finish, "logprobs": null }]
            })
        };
        let first = std::sync::Mutex::new(true);
        let token_chunk = chunk.clone();
        let format: super::api::TokenFormat = Box::new(move |text: &str| {
            let mut first = first.lock().unwrap_or_else(|e| e.into_inner());
            let delta = if *first { serde_json::json!({ "role": "assistant", "content": text }) } else { serde_json::json!({ "content": text }) };
            *first = false;
            Event::default().json_data(token_chunk(delta, None)).ok()
        });
        let rx = generate(&state, format, work, move |state, result: Result<Asked, ApiError>| {
            let asked = match result {
                Ok(a) => a,
                Err(e) => return vec![Streamed::Event(Event::default().json_data(e.body()).unwrap_or_default()), Streamed::Event(Event::default().data("[DONE]"))],
            };
            count(state, &asked);
            let mut last = chunk(serde_json::json!({}), Some(if asked.answer.hit_token_cap { "length" } else { "stop" }));
            last["ragbox"] = extra(&asked);
            vec![Streamed::Event(Event::default().json_data(last).unwrap_or_default()), Streamed::Event(Event::default().data("[DONE]"))]
        })?;
        return Ok(event_stream(rx).into_response());
    }
    let mut rx = generate(&state, Box::new(|_: &str| None), work, move |state, result: Result<Asked, ApiError>| {
        let value = result.map(|asked| {
            count(state, &asked);
            let a = &asked.answer;
            serde_json::json!({
                "id": id, "object": "chat.completion", "created": created, "model": model,
                "choices": [{
                    "index": 0,
                    "message": { "role": "assistant", "content": a.answer },
                    "finish_reason": if a.hit_token_cap { "length" } else { "stop" },
                    "logprobs": null
                }],
                "usage": {
                    "prompt_tokens": a.timings.prompt_tokens,
                    "completion_tokens": a.timings.completion_tokens,
                    "total_tokens": a.timings.prompt_tokens + a.timings.completion_tokens
                },
                "ragbox": extra(&asked),
            })
        });
        vec![Streamed::Done(value)]
    })?;
    while let Some(msg) = rx.recv().await {
        if let Streamed::Done(value) = msg {
            return value.map(|v| Json(v).into_response());
        }
    }
    Err(ApiError::internal("the answer ended without a result"))
}

/// The body of `POST /v1/embeddings` (fields ragbox does not use, such as `user`, are ignored).
#[derive(Debug, Deserialize)]
pub struct EmbeddingBody {
    /// `ragbox`, `ragbox/<tenant>` or an embedding model's name.
    pub model: String,
    /// A string or a list of strings.
    pub input: serde_json::Value,
    /// `float` (default) or `base64`.
    #[serde(default)]
    pub encoding_format: Option<String>,
    /// `query` or `passage` (default).
    #[serde(default)]
    pub input_type: Option<String>,
    /// Refused unless it is the model's own size (vectors are not shortened).
    #[serde(default)]
    pub dimensions: Option<usize>,
}

/// The texts of `input`: a string or a list of strings; token arrays are refused with the reason.
fn input_texts(input: &serde_json::Value) -> Result<Vec<String>, ApiError> {
    let refuse = || ApiError::invalid("`input` must be a string or a list of strings (token arrays are not read: send the text)");
    match input {
        serde_json::Value::String(s) => Ok(vec![s.clone()]),
        serde_json::Value::Array(items) => items.iter().map(|v| v.as_str().map(str::to_string).ok_or_else(refuse)).collect(),
        _ => Err(refuse()),
    }
}

fn text_kind(input_type: Option<&str>) -> Result<TextKind, ApiError> {
    match input_type.unwrap_or("passage") {
        "query" | "search_query" => Ok(TextKind::Query),
        "passage" | "document" | "search_document" => Ok(TextKind::Passage),
        other => Err(ApiError::invalid(format!("`input_type` `{other}`: use query or passage"))),
    }
}

/// `POST /v1/embeddings`.
pub async fn embeddings(Extract(state): Extract<State>, Authed(caller): Authed, ApiJson(body): ApiJson<EmbeddingBody>) -> Result<Json<serde_json::Value>, ApiError> {
    let texts = input_texts(&body.input)?;
    let kind = text_kind(body.input_type.as_deref())?;
    let base64 = match body.encoding_format.as_deref().unwrap_or("float") {
        "float" => false,
        "base64" => true,
        other => return Err(ApiError::invalid(format!("`encoding_format` `{other}`: use float or base64"))),
    };
    let tenant = match body.model.as_str() {
        m if m == "ragbox" || m.starts_with("ragbox/") => Some(tenant_of(m, &caller)?),
        _ => None,
    };
    let model = body.model.clone();
    let embedded = state
        .blocking(move |s| {
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let with = match &tenant {
                Some(t) => EmbedWith::Tenant(t),
                None => EmbedWith::Model(&model),
            };
            s.embed(&caller, with, &refs, kind)
        })
        .await?;
    if let Some(d) = body.dimensions {
        let own = embedded.vectors.first().map_or(0, Vec::len);
        if d != own {
            return Err(ApiError::invalid(format!("`dimensions` {d}: {} makes {own}-dimensional vectors and does not shorten them", embedded.model)));
        }
    }
    let data: Vec<serde_json::Value> = embedded
        .vectors
        .iter()
        .enumerate()
        .map(|(index, v)| {
            let embedding = if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                serde_json::Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                serde_json::json!(v)
            };
            serde_json::json!({ "object": "embedding", "index": index, "embedding": embedding })
        })
        .collect();
    Ok(Json(serde_json::json!({
        "object": "list",
        "data": data,
        "model": embedded.model,
        "usage": { "prompt_tokens": embedded.tokens, "total_tokens": embedded.tokens },
    })))
}
