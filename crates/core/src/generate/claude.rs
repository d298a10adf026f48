//! The remote generator: Anthropic's Messages API, streamed over server-sent events. Built only
//! with the `claude` feature and used only when the configuration selects it; every prompt sent
//! here leaves the machine, which [`Generator::is_remote`] reports so callers can warn.

use serde_json::json;

use super::{ClaudeOptions, GenerateRequest, Generation, Generator, Role, Streaming, TokenSink};
use crate::error::{Error, Result};

/// Claude through the Messages API.
pub struct ClaudeGenerator {
    options: ClaudeOptions,
    client: reqwest::Client,
}

fn remote(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Generate(format!("claude: {what}: {e}"))
}

impl ClaudeGenerator {
    /// A client; nothing is sent until a request is made.
    pub fn new(options: ClaudeOptions) -> Result<ClaudeGenerator> {
        if options.api_key.trim().is_empty() {
            return Err(Error::Config("the Claude backend needs an API key; set the environment variable the configuration names".into()));
        }
        let client = reqwest::Client::builder()
            .timeout(std::time::Duration::from_millis(options.timeout_ms))
            .build()
            .map_err(|e| remote("client", e))?;
        Ok(ClaudeGenerator { options, client })
    }
}

#[async_trait::async_trait]
impl Generator for ClaudeGenerator {
    fn model_id(&self) -> &str {
        &self.options.model
    }

    fn is_remote(&self) -> bool {
        true
    }

    fn destination(&self) -> String {
        let host = reqwest::Url::parse(&self.options.base_url).ok().and_then(|u| u.host_str().map(str::to_string));
        format!("claude {}", host.unwrap_or_else(|| self.options.base_url.clone()))
    }

    async fn generate(&self, request: &GenerateRequest, sink: &mut (dyn TokenSink + Send)) -> Result<Generation> {
        let mut streaming = Streaming::new();
        let system: Vec<&str> =
            request.messages.iter().filter(|m| m.role == Role::System).map(|m| m.content.as_str()).collect();
        let messages: Vec<serde_json::Value> = request
            .messages
            .iter()
            .filter(|m| m.role != Role::System)
            .map(|m| json!({"role": if m.role == Role::User { "user" } else { "assistant" }, "content": m.content}))
            .collect();
        let mut body = json!({
            "model": self.options.model,
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "system": system.join("\n\n"),
            "messages": messages,
            "stream": true,
        });
        if !request.stop.is_empty() {
            body["stop_sequences"] = json!(request.stop);
        }
        let mut response = self
            .client
            .post(format!("{}/v1/messages", self.options.base_url.trim_end_matches('/')))
            .header("x-api-key", &self.options.api_key)
            .header("anthropic-version", "2023-06-01")
            .json(&body)
            .send()
            .await
            .map_err(|e| remote("request", e))?;
        if !response.status().is_success() {
            let status = response.status();
            let text = response.text().await.unwrap_or_default();
            return Err(remote(&format!("HTTP {status}"), text));
        }
        let mut out = Generation { written_by: self.destination(), ..Generation::default() };
        let mut pending = String::new();
        while let Some(bytes) = response.chunk().await.map_err(|e| remote("stream", e))? {
            pending.push_str(&String::from_utf8_lossy(&bytes));
            while let Some(end) = pending.find('\n') {
                let line: String = pending.drain(..=end).collect();
                let Some(data) = line.trim().strip_prefix("data:") else { continue };
                let Ok(event) = serde_json::from_str::<serde_json::Value>(data.trim()) else { continue };
                match event["type"].as_str() {
                    Some("content_block_delta") => {
                        if let Some(text) = event["delta"]["text"].as_str() {
                            streaming.push(&mut out, text, &request.stop, sink);
                        }
                    }
                    Some("message_start") => {
                        out.prompt_tokens = event["message"]["usage"]["input_tokens"].as_u64().unwrap_or(0) as usize;
                    }
                    Some("message_delta") => {
                        out.completion_tokens = event["usage"]["output_tokens"].as_u64().unwrap_or(0) as usize;
                    }
                    Some("error") => return Err(remote("stream", event["error"].to_string())),
                    _ => {}
                }
            }
        }
        streaming.finish(&mut out, &request.stop);
        Ok(out)
    }
}
