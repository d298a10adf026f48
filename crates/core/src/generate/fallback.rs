//! A generator that falls back to another when the first cannot be reached:
//! `generate.fallback = "local"` puts the local model behind an inference server.
//!
//! Only [`Error::Unreachable`] (no connection, or the server said it is busy) moves a request to
//! the fallback, before anything was streamed; a server that fails mid-reply fails the request,
//! so an answer is never stitched from two models. The reply says who wrote it and why in
//! [`Generation::written_by`], which the answer log keeps.

use std::sync::Arc;

use super::{GenerateRequest, Generation, Generator, Message, TokenSink};
use crate::error::{Error, Result};

/// `primary`, or `fallback` when `primary` is unreachable.
pub struct Fallback {
    primary: Arc<dyn Generator>,
    fallback: Arc<dyn Generator>,
}

impl Fallback {
    /// Both generators, already made.
    pub fn new(primary: Arc<dyn Generator>, fallback: Arc<dyn Generator>) -> Fallback {
        Fallback { primary, fallback }
    }
}

#[async_trait::async_trait]
impl Generator for Fallback {
    fn model_id(&self) -> &str {
        self.primary.model_id()
    }

    fn is_remote(&self) -> bool {
        self.primary.is_remote() || self.fallback.is_remote()
    }

    fn destination(&self) -> String {
        format!("{}, else {}", self.primary.destination(), self.fallback.destination())
    }

    async fn generate(&self, request: &GenerateRequest, sink: &mut (dyn TokenSink + Send)) -> Result<Generation> {
        match self.primary.generate(request, sink).await {
            Err(Error::Unreachable { server, detail }) => {
                tracing::warn!(%server, %detail, fallback = self.fallback.model_id(), "inference server unreachable: the local model answers");
                let mut g = self.fallback.generate(request, sink).await?;
                g.written_by = format!("{} {} (fallback: {server} unreachable: {detail})", g.written_by, self.fallback.model_id());
                Ok(g)
            }
            other => other,
        }
    }

    async fn yes_no(&self, conversations: &[Vec<Message>]) -> Result<Vec<f32>> {
        match self.primary.yes_no(conversations).await {
            Err(Error::Unreachable { .. }) => self.fallback.yes_no(conversations).await,
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::{block_on, Discard};

    /// A generator that is unreachable, fails, or answers, as told.
    struct Scripted {
        name: &'static str,
        outcome: fn() -> Result<Generation>,
    }

    #[async_trait::async_trait]
    impl Generator for Scripted {
        fn model_id(&self) -> &str {
            self.name
        }
        fn destination(&self) -> String {
            self.name.to_string()
        }
        async fn generate(&self, _r: &GenerateRequest, _s: &mut (dyn TokenSink + Send)) -> Result<Generation> {
            (self.outcome)()
        }
    }

    fn answer() -> Result<Generation> {
        Ok(Generation { text: "thirty days".into(), written_by: "local".into(), ..Generation::default() })
    }

    #[test]
    fn only_an_unreachable_server_hands_the_request_to_the_fallback() {
        let local: Arc<dyn Generator> = Arc::new(Scripted { name: "local-model", outcome: answer });
        let request = GenerateRequest::greedy(vec![Message::user("q")], 8);
        let down = Fallback::new(
            Arc::new(Scripted { name: "server", outcome: || Err(Error::Unreachable { server: "http://10.0.0.5:8080/v1".into(), detail: "connection refused".into() }) }),
            local.clone(),
        );
        let g = block_on(down.generate(&request, &mut Discard)).unwrap();
        assert_eq!(g.text, "thirty days");
        assert!(g.written_by.starts_with("local local-model (fallback: http://10.0.0.5:8080/v1 unreachable"), "{}", g.written_by);
        assert_eq!(down.destination(), "server, else local-model");
        let broken = Fallback::new(Arc::new(Scripted { name: "server", outcome: || Err(Error::Generate("the reply broke off".into())) }), local);
        assert!(matches!(block_on(broken.generate(&request, &mut Discard)), Err(Error::Generate(_))));
    }
}
