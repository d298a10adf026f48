//! Stand-in for the local generator in builds without the `llm` feature: loading it says how to
//! rebuild.

use std::path::PathBuf;

use super::{GenerateRequest, Generation, Generator, TokenSink};
use crate::error::{Error, Result};

/// How to load the local model (unused without the `llm` feature).
#[derive(Debug, Clone)]
pub struct LocalOptions {
    /// Manifest name.
    pub name: String,
    /// The GGUF file.
    pub file: PathBuf,
    /// Run on the CPU.
    pub force_cpu: bool,
    /// Sequences decoded together.
    pub max_num_seqs: usize,
    /// Prompt prefixes kept for reuse.
    pub prefix_cache: usize,
    /// Dequantise the weights to f32 at load.
    pub dequantize: bool,
}

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
