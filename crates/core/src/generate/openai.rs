//! An OpenAI-compatible inference server on the user's network (llama.cpp's server, vLLM, TGI,
//! Ollama, mistral.rs' server): `POST {base_url}/chat/completions`, streamed as server-sent
//! events.
//!
//! Only a host on `generate.allow_hosts` is ever contacted ([`HostAllowlist`], checked when the
//! generator is made), redirects are never followed (a redirect could name any host), and the
//! optional key is sent as a bearer token. A reply whose reader goes away is cancelled by closing
//! the connection, which frees the server's slot. A stream that ends without the server's end
//! marker is an error, so a server that dies mid-answer never leaves half an answer that reads as
//! whole. Failing to reach the server at all is [`Error::Unreachable`], which [`super::Fallback`]
//! answers with the local model when the configuration asks for that.

use std::time::Duration;

use serde_json::json;

use super::{GenerateRequest, Generation, Generator, Role, Streaming, TokenSink};
use crate::allowlist::HostAllowlist;
use crate::error::{Error, Result};

/// How to reach the inference server.
#[derive(Debug, Clone)]
pub struct OpenAiOptions {
    /// The API base, e.g. `http://10.0.0.5:8080/v1`.
    pub base_url: String,
    /// The model name the server expects.
    pub model: String,
    /// Bearer token, if the server wants one (read by the caller from an environment variable or
    /// a file the configuration names).
    pub api_key: Option<String>,
    /// Giving up on connecting.
    pub connect_timeout_ms: u64,
    /// Giving up on a whole reply.
    pub timeout_ms: u64,
    /// The hosts prompts may go to.
    pub allow: HostAllowlist,
}

/// Generation on an OpenAI-compatible server.
pub struct OpenAiGenerator {
    options: OpenAiOptions,
    /// `host:port` of the server, for messages and log rows.
    host: String,
    client: reqwest::Client,
}

impl OpenAiGenerator {
    /// A client for the server `options` names, if the allowlist allows its host. Nothing is
    /// sent until a request is made.
    pub fn new(options: OpenAiOptions) -> Result<OpenAiGenerator> {
        let host = options.allow.check(&options.base_url)?;
        let url = reqwest::Url::parse(&options.base_url).map_err(|e| Error::Config(format!("generate.openai_base_url: {e}")))?;
        let host = match url.port_or_known_default() {
            Some(port) => format!("{host}:{port}"),
            None => host,
        };
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_millis(options.connect_timeout_ms))
            .timeout(Duration::from_millis(options.timeout_ms))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .build()
            .map_err(|e| Error::Generate(format!("inference server client: {e}")))?;
        Ok(OpenAiGenerator { options, host, client })
    }

    /// Asks the server which models it serves (`GET {base_url}/models`), for `doctor`.
    pub async fn probe(&self) -> Result<Vec<String>> {
        let mut call = self.client.get(format!("{}/models", self.options.base_url.trim_end_matches('/')));
        if let Some(key) = &self.options.api_key {
            call = call.bearer_auth(key);
        }
        let response = call.send().await.map_err(|e| Error::Unreachable { server: format!("{} ({})", self.options.base_url, self.host), detail: e.to_string() })?;
        if !response.status().is_success() {
            return Err(self.failed("GET /models", response.status()));
        }
        let v: serde_json::Value = response.json().await.map_err(|e| self.failed("GET /models", e))?;
        Ok(v["data"].as_array().into_iter().flatten().filter_map(|m| m["id"].as_str().map(str::to_string)).collect())
    }

    fn endpoint(&self) -> String {
        format!("{}/chat/completions", self.options.base_url.trim_end_matches('/'))
    }

    fn failed(&self, what: &str, e: impl std::fmt::Display) -> Error {
        Error::Generate(format!("inference server {} ({}): {what}: {e}", self.host, self.options.model))
    }
}

/// The chat-completions body for `request`, streamed, with usage in the last event.
fn body(model: &str, request: &GenerateRequest) -> serde_json::Value {
    let messages: Vec<serde_json::Value> = request
        .messages
        .iter()
        .map(|m| {
            let role = match m.role {
                Role::System => "system",
                Role::User => "user",
                Role::Assistant => "assistant",
            };
            json!({"role": role, "content": m.content})
        })
        .collect();
    let mut body = json!({
        "model": model,
        "messages": messages,
        "max_tokens": request.max_tokens.max(1),
        "temperature": request.temperature,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    if !request.stop.is_empty() {
        body["stop"] = json!(request.stop);
    }
    body
}

/// One server-sent event's data, parsed: its text piece, whether a choice finished, usage.
#[derive(Debug, Default, PartialEq)]
struct Event {
    text: String,
    finished: bool,
    usage: Option<(usize, usize)>,
}

/// `data` of one event; `None` for the end marker `[DONE]`.
fn event(data: &str) -> std::result::Result<Option<Event>, String> {
    if data == "[DONE]" {
        return Ok(None);
    }
    let v: serde_json::Value = serde_json::from_str(data).map_err(|e| format!("unreadable event ({e}): {}", data.chars().take(200).collect::<String>()))?;
    if let Some(err) = v.get("error") {
        return Err(err.get("message").and_then(|m| m.as_str()).map_or_else(|| err.to_string(), str::to_string));
    }
    let mut out = Event::default();
    for choice in v["choices"].as_array().into_iter().flatten() {
        if let Some(t) = choice["delta"]["content"].as_str() {
            out.text.push_str(t);
        }
        out.finished |= choice["finish_reason"].is_string();
    }
    if let (Some(p), Some(c)) = (v["usage"]["prompt_tokens"].as_u64(), v["usage"]["completion_tokens"].as_u64()) {
        out.usage = Some((p as usize, c as usize));
    }
    Ok(Some(out))
}

#[async_trait::async_trait]
impl Generator for OpenAiGenerator {
    fn model_id(&self) -> &str {
        &self.options.model
    }

    fn destination(&self) -> String {
        format!("openai {}", self.host)
    }

    async fn generate(&self, request: &GenerateRequest, sink: &mut (dyn TokenSink + Send)) -> Result<Generation> {
        let mut streaming = Streaming::new();
        let mut call = self.client.post(self.endpoint()).json(&body(&self.options.model, request));
        if let Some(key) = &self.options.api_key {
            call = call.bearer_auth(key);
        }
        let mut response = call.send().await.map_err(|e| {
            if e.is_connect() || (e.is_timeout() && !e.is_body()) {
                Error::Unreachable { server: format!("{} ({})", self.options.base_url, self.host), detail: e.to_string() }
            } else {
                self.failed("request", e)
            }
        })?;
        let status = response.status();
        if status == reqwest::StatusCode::SERVICE_UNAVAILABLE || status == reqwest::StatusCode::TOO_MANY_REQUESTS {
            return Err(Error::Unreachable { server: format!("{} ({})", self.options.base_url, self.host), detail: format!("HTTP {status}: busy") });
        }
        if !status.is_success() {
            let text = response.text().await.unwrap_or_default();
            return Err(self.failed(&format!("HTTP {status}"), text.chars().take(300).collect::<String>()));
        }
        let mut out = Generation { written_by: self.destination(), ..Generation::default() };
        let (mut pending, mut done, mut finished) = (String::new(), false, false);
        'read: while let Some(bytes) = response.chunk().await.map_err(|e| self.failed("the reply broke off", e))? {
            pending.push_str(&String::from_utf8_lossy(&bytes));
            while let Some(end) = pending.find('\n') {
                let line: String = pending.drain(..=end).collect();
                let Some(data) = line.trim().strip_prefix("data:") else { continue };
                match event(data.trim()).map_err(|e| self.failed("the server reported", e))? {
                    None => {
                        done = true;
                        break 'read;
                    }
                    Some(e) => {
                        if let Some((p, c)) = e.usage {
                            (out.prompt_tokens, out.completion_tokens) = (p, c);
                        }
                        finished |= e.finished;
                        if streaming.push(&mut out, &e.text, &request.stop, sink) {
                            // The reply is over: dropping the response closes the connection.
                            done = true;
                            break 'read;
                        }
                    }
                }
            }
            if sink.cancelled() {
                // Closing the connection is how an OpenAI-style server learns to stop.
                done = true;
                break;
            }
        }
        if !done && !finished {
            return Err(self.failed("the reply broke off", "the stream ended before the server said it was complete"));
        }
        streaming.finish(&mut out, &request.stop);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::Message;

    #[test]
    fn the_request_is_the_openai_chat_shape_streamed_with_usage() {
        let mut r = GenerateRequest::greedy(vec![Message::system("Cite."), Message::user("Q?")], 64);
        r.stop = vec!["(from ".into()];
        let b = body("qwen", &r);
        assert_eq!(b["messages"][0], json!({"role": "system", "content": "Cite."}));
        assert_eq!(b["messages"][1]["role"], "user");
        assert_eq!(b["stream"], true);
        assert_eq!(b["stream_options"]["include_usage"], true);
        assert_eq!(b["max_tokens"], 64);
        assert_eq!(b["stop"], json!(["(from "]));
    }

    #[test]
    fn events_give_text_the_finish_usage_and_the_end_marker() {
        assert_eq!(event("[DONE]").unwrap(), None);
        let e = event(r#"{"choices":[{"index":0,"delta":{"content":"Thirty"},"finish_reason":null}]}"#).unwrap().unwrap();
        assert_eq!((e.text.as_str(), e.finished, e.usage), ("Thirty", false, None));
        let e = event(r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":3}}"#).unwrap().unwrap();
        assert_eq!((e.text.as_str(), e.finished, e.usage), ("", true, Some((12, 3))));
        let e = event(r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}"#).unwrap().unwrap();
        assert_eq!(e.usage, Some((5, 1)));
        assert!(event(r#"{"error":{"message":"context too long"}}"#).unwrap_err().contains("context too long"));
        assert!(event("not json").is_err());
    }

    #[test]
    fn a_host_off_the_allowlist_is_refused_before_anything_is_sent() {
        let options = OpenAiOptions {
            base_url: "http://192.168.7.7:8080/v1".into(),
            model: "m".into(),
            api_key: None,
            connect_timeout_ms: 1000,
            timeout_ms: 1000,
            allow: HostAllowlist::parse(&["127.0.0.1".into()]).unwrap(),
        };
        let e = OpenAiGenerator::new(options).err().unwrap().to_string();
        assert!(e.contains("192.168.7.7") && e.contains("allow_hosts"), "{e}");
    }
}
