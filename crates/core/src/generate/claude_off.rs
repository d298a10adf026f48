//! Stand-in for the Claude backend in builds without the `claude` feature: constructing it says
//! how to rebuild. Nothing here can open a connection.

use super::{ClaudeOptions, GenerateRequest, Generation, Generator, TokenSink};
use crate::error::{Error, Result};

/// The remote generator; never constructed in this build.
pub struct ClaudeGenerator(());

impl ClaudeGenerator {
    /// Always [`Error::NotCompiled`].
    pub fn new(_options: ClaudeOptions) -> Result<ClaudeGenerator> {
        Err(Error::NotCompiled("claude"))
    }
}

#[async_trait::async_trait]
impl Generator for ClaudeGenerator {
    fn model_id(&self) -> &str {
        ""
    }
    fn is_remote(&self) -> bool {
        true
    }
    async fn generate(&self, _request: &GenerateRequest, _sink: &mut (dyn TokenSink + Send)) -> Result<Generation> {
        Err(Error::NotCompiled("claude"))
    }
}
