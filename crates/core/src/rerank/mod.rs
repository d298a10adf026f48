//! Relevance scoring of (query, passage) pairs: the [`Reranker`] seam and the candle cross-encoder.
//!
//! May import `model`, `types` and `error`. Scores come back in input order; `retrieve` sorts.

mod cross_encoder;

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::model::{Architecture, ModelSpec, ModelStore};

pub use cross_encoder::{CrossEncoder, RerankOptions};

/// Scores passages against a query; higher is more relevant.
pub trait Reranker: Send + Sync {
    /// Model name, for `--explain` and audit rows.
    fn model_id(&self) -> &str;
    /// One score per passage, in input order.
    fn score(&self, query: &str, passages: &[&str]) -> Result<Vec<f32>>;
    /// Whether scoring the few dozen sentences of an answer's passages costs little next to the
    /// answer (a cross-encoder: tens of milliseconds a batch; an LLM: a prefill per sentence).
    fn scores_sentences_cheaply(&self) -> bool {
        false
    }
}

/// Loads the reranker a manifest entry describes, verifying its files first.
pub fn load_reranker(store: &ModelStore, spec: &ModelSpec, options: &RerankOptions) -> Result<Arc<dyn Reranker>> {
    match spec.architecture {
        Architecture::BertCrossEncoder => Ok(Arc::new(CrossEncoder::load(store, spec, options)?)),
        other => Err(Error::Invalid(format!("model `{}` is a {other:?} model, not a reranker", spec.name))),
    }
}
