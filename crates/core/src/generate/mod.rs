//! Text generation: the [`Generator`] seam, the local GGUF backend (mistralrs), an
//! OpenAI-compatible inference server on the user's network (only hosts the configuration
//! allows, optionally falling back to the local model) and the opt-in Claude backend.
//!
//! May import `types`, `error`, `model` and `allowlist`. The only async seam of the crate: mistralrs is async.
//! Callers outside an async context drive it with [`block_on`]. Tokens stream into a
//! caller-supplied [`TokenSink`]; decoding is greedy unless a temperature is given.
//!
//! ```
//! use ragbox_core::generate::{Message, Role};
//! let m = Message::user("What is the capital of France?");
//! assert_eq!(m.role, Role::User);
//! ```

#[cfg_attr(feature = "claude", path = "claude.rs")]
#[cfg_attr(not(feature = "claude"), path = "claude_off.rs")]
mod claude;
#[cfg_attr(feature = "llm", path = "local.rs")]
#[cfg_attr(not(feature = "llm"), path = "local_off.rs")]
mod local;
mod fallback;
pub mod kernels;
mod openai;
pub mod rerank;

use std::path::PathBuf;

use serde::Serialize;

use crate::error::Result;

pub use claude::ClaudeGenerator;
pub use fallback::Fallback;
pub use local::GgufGenerator;
pub use openai::{OpenAiGenerator, OpenAiOptions};

/// How to load the local model.
#[derive(Debug, Clone)]
pub struct LocalOptions {
    /// Manifest name, reported as the model id.
    pub name: String,
    /// The GGUF file (already verified against its sha256 pin).
    pub file: PathBuf,
    /// Run on the CPU even when a GPU feature is compiled in.
    pub force_cpu: bool,
    /// Sequences decoded together (concurrent requests, e.g. the web server's).
    pub max_num_seqs: usize,
    /// Prompt prefixes whose KV cache is kept for reuse (0: no prefix caching).
    pub prefix_cache: usize,
    /// Dequantise the weights to f32 at load (CPU): prompts go through gemm (~10% faster
    /// prefill), decoding reads 4 bytes per parameter (5x slower than the quantised AVX2 kernels)
    /// and memory grows by ~4 bytes per parameter. Off by default.
    pub dequantize: bool,
}

/// How to reach the API.
#[derive(Debug, Clone)]
pub struct ClaudeOptions {
    /// Model name, e.g. `claude-sonnet-4-5`.
    pub model: String,
    /// The API key (read by the caller from the environment variable the configuration names).
    pub api_key: String,
    /// API base, `https://api.anthropic.com` unless configured.
    pub base_url: String,
    /// Request timeout.
    pub timeout_ms: u64,
}

/// Who speaks a chat message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions.
    System,
    /// The person asking.
    User,
    /// The model.
    Assistant,
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Message {
    /// Speaker.
    pub role: Role,
    /// Text.
    pub content: String,
}

impl Message {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Message {
        Message { role: Role::System, content: content.into() }
    }
    /// A user message.
    pub fn user(content: impl Into<String>) -> Message {
        Message { role: Role::User, content: content.into() }
    }
    /// An assistant message.
    pub fn assistant(content: impl Into<String>) -> Message {
        Message { role: Role::Assistant, content: content.into() }
    }
}

/// What to generate from.
#[derive(Debug, Clone, Serialize)]
pub struct GenerateRequest {
    /// The conversation, rendered by the model's own chat template.
    pub messages: Vec<Message>,
    /// Most tokens generated.
    pub max_tokens: usize,
    /// 0: greedy (the default); above: sampling temperature.
    pub temperature: f64,
    /// Texts that end the reply where one first appears; the reply stops before it.
    pub stop: Vec<String>,
}

impl GenerateRequest {
    /// Greedy decoding of `messages`, at most `max_tokens`.
    pub fn greedy(messages: Vec<Message>, max_tokens: usize) -> GenerateRequest {
        GenerateRequest { messages, max_tokens, temperature: 0.0, stop: Vec::new() }
    }
}

/// `text` up to the first of the `stop` texts (all of it when none appears): a backend's reply
/// as [`GenerateRequest::stop`] asks for it, whether or not the engine left the stop text in.
pub fn until_stop<'a>(text: &'a str, stop: &[String]) -> &'a str {
    match showable(text, stop) {
        (end, true) => &text[..end],
        _ => text,
    }
}

/// How much of `text`, a reply still being written, may be shown, and whether it is over: up to
/// the first of the `stop` texts (`true`), or else all of it but a tail that could be the start
/// of one (`false`: "… fault. (fr" shows "… fault. " until the next token says more). The
/// engine's own stop check let the reader see "(from Travel and" before the reply was cut, and
/// generated to the token cap behind it.
pub fn showable(text: &str, stop: &[String]) -> (usize, bool) {
    let stops = || stop.iter().map(String::as_str).filter(|s| !s.is_empty());
    if let Some(end) = stops().filter_map(|s| text.find(s)).min() {
        return (end, true);
    }
    let mut keep = text.len();
    for s in stops() {
        if let Some(k) = (1..s.len()).rev().find(|&k| s.is_char_boundary(k) && text.ends_with(&s[..k])) {
            keep = keep.min(text.len() - k);
        }
    }
    (keep, false)
}

/// A reply as it streams in: each piece is added to the [`Generation`] and the part that may be
/// shown goes to the sink, never a stop text or its possible start ([`showable`]).
struct Streaming {
    started: std::time::Instant,
    /// Bytes of the text shown so far.
    shown: usize,
    /// A stop text appeared: the reply is over.
    stopped: bool,
}

impl Streaming {
    fn new() -> Streaming {
        Streaming { started: std::time::Instant::now(), shown: 0, stopped: false }
    }

    fn elapsed_ms(&self) -> f64 {
        self.started.elapsed().as_secs_f64() * 1e3
    }

    /// Adds `piece`; true when a stop text has ended the reply.
    fn push(&mut self, out: &mut Generation, piece: &str, stop: &[String], sink: &mut (dyn TokenSink + Send)) -> bool {
        if piece.is_empty() {
            return self.stopped;
        }
        if out.text.is_empty() {
            out.first_token_ms = self.elapsed_ms();
        }
        out.text.push_str(piece);
        let (end, hit) = showable(&out.text, stop);
        if end > self.shown {
            sink.token(&out.text[self.shown..end]);
            self.shown = end;
        }
        self.stopped |= hit;
        self.stopped
    }

    /// The reply ends: what was held back as the possible start of a stop text is cut too.
    fn finish(&self, out: &mut Generation, stop: &[String]) {
        out.total_ms = self.elapsed_ms();
        out.text.truncate(showable(&out.text, stop).0);
        if out.completion_tokens == 0 && !out.text.is_empty() {
            out.completion_tokens = out.text.split_whitespace().count();
        }
    }
}

/// A finished generation.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Generation {
    /// The text generated.
    pub text: String,
    /// Prompt tokens, as the backend counted them.
    pub prompt_tokens: usize,
    /// Tokens generated.
    pub completion_tokens: usize,
    /// Milliseconds from the request to the first token.
    pub first_token_ms: f64,
    /// Milliseconds from the request to the last token.
    pub total_ms: f64,
    /// Where it was written ([`Generator::destination`]), and, when a fallback wrote it, why.
    pub written_by: String,
}

impl Generation {
    /// Tokens per second after the first token (decoding speed).
    pub fn tokens_per_second(&self) -> f64 {
        let decode_ms = self.total_ms - self.first_token_ms;
        if self.completion_tokens > 1 && decode_ms > 0.0 {
            (self.completion_tokens - 1) as f64 / (decode_ms / 1e3)
        } else {
            0.0
        }
    }
}

/// Receives tokens as they are generated.
pub trait TokenSink {
    /// One piece of text, in order.
    fn token(&mut self, text: &str);

    /// True when whoever reads the tokens has gone (a closed HTTP stream, a deadline passed):
    /// the generator stops at the next token and returns what it has.
    fn cancelled(&self) -> bool {
        false
    }
}

/// A sink that drops every token.
pub struct Discard;

impl TokenSink for Discard {
    fn token(&mut self, _text: &str) {}
}

impl<F: FnMut(&str)> TokenSink for F {
    fn token(&mut self, text: &str) {
        self(text)
    }
}

/// Generates text from chat messages.
#[async_trait::async_trait]
pub trait Generator: Send + Sync {
    /// Model name, for audit rows and reports.
    fn model_id(&self) -> &str;

    /// True when text sent to this generator leaves the machine.
    fn is_remote(&self) -> bool {
        false
    }

    /// Where prompts go, for the start-up line, `doctor` and every answer's log row: `local`
    /// (this process), `openai 10.0.0.5:8080` (an inference server), `claude api.anthropic.com`.
    fn destination(&self) -> String {
        "local".into()
    }

    /// Generates a reply to `request`, streaming its tokens into `sink`.
    async fn generate(&self, request: &GenerateRequest, sink: &mut (dyn TokenSink + Send)) -> Result<Generation>;

    /// For each conversation, how much more the model expects its next token to be "yes" than
    /// "no": the log-odds `logit(yes) - logit(no)`, in input order. Backends without logits
    /// answer by generating one token (+1 for yes, -1 for no, 0 otherwise).
    async fn yes_no(&self, conversations: &[Vec<Message>]) -> Result<Vec<f32>> {
        let mut out = Vec::with_capacity(conversations.len());
        for messages in conversations {
            let g = self.generate(&GenerateRequest::greedy(messages.clone(), 2), &mut Discard).await?;
            let word = g.text.trim().to_ascii_lowercase();
            out.push(if word.starts_with("yes") {
                1.0
            } else if word.starts_with("no") {
                -1.0
            } else {
                0.0
            });
        }
        Ok(out)
    }
}

/// Runs a future to completion on a current-thread runtime, from synchronous code. Panics
/// inside an async context (a runtime cannot block on itself); the CLI and the eval runner are
/// synchronous, and the server uses `spawn_blocking` around the synchronous stages instead.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    runtime().block_on(future)
}

/// The process's runtime for generation: mistralrs spawns its engine onto it.
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime can always be built")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_text_and_its_possible_start_are_never_shown() {
        let stop = vec!["(from ".to_string()];
        assert_eq!(showable("Within 30 days [1].", &stop), (19, false));
        // The tail could open the stop text: held back until the next token says.
        assert_eq!(showable("Within 30 days [1]. (fr", &stop), (20, false));
        assert_eq!(showable("Within 30 days [1]. (", &stop), (20, false));
        // It did: the reply is over where the stop text begins.
        assert_eq!(showable("Within 30 days [1]. (from Travel and", &stop), (20, true));
        // It did not: shown after all.
        assert_eq!(showable("Within 30 days [1]. (frankly", &stop), (28, false));
        assert_eq!(showable("Büro (ü", &["(üb".to_string()]), ("Büro ".len(), false));
        assert_eq!(showable("anything", &[]), (8, false));
        assert_eq!(until_stop("a (from b", &stop), "a ");
    }
}
