//! Stand-in for the local generator in builds without the `llm` feature: loading it says how to
//! rebuild.


use super::{LocalOptions, GenerateRequest, Generation, Generator, TokenSink};
use crate::error::{Error, Result};

/// The local generator; never constructed in this build.
pub struct GgufGenerator(());

impl GgufGenerator {
    /// Always [`Error::NotCompiled`].
    pub async fn load(_options: &LocalOptions) -> Result<GgufGenerator> {
        Err(Error::NotCompiled("llm"))
    }
}

#[async_trait::async_trait]
impl Generator for GgufGenerator {
    fn model_id(&self) -> &str {
        ""
    }
    async fn generate(&self, _request: &GenerateRequest, _sink: &mut (dyn TokenSink + Send)) -> Result<Generation> {
        Err(Error::NotCompiled("llm"))
    }
}
