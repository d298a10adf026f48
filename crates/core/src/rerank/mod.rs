//! Relevance scoring of (query, passage) pairs: the [`Reranker`] seam, the candle cross-encoder
//! and the reader trained on its states.
//!
//! May import `model`, `types` and `error`. Scores come back in input order; `retrieve` sorts.

mod cross_encoder;
pub mod reader;

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
    /// How many layers the model's body has (0 for a model that is not a layered encoder).
    fn depth(&self) -> usize {
        0
    }
    /// Each pair's state (the last layer's [CLS] state and its tokens' mean), logit and, with
    /// `tap`, its token states entering that layer: what the reader is trained on
    /// (`ragbox eval --reader-features`). `None` from a model without them.
    fn represent(&self, _query: &str, _passages: &[&str], _tap: Option<usize>) -> Result<Option<Vec<Represented>>> {
        Ok(None)
    }
    /// The trained reader's probability that each passage (a unit in its context) states the
    /// answer to `query`. `None` from a model without a reader.
    fn read(&self, _query: &str, _passages: &[&str]) -> Result<Option<Vec<Reading>>> {
        Ok(None)
    }
}

/// What the reader says of one (question, unit) pair.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    /// The probability that the unit states the answer.
    pub probability: f32,
    /// The cross-encoder's relevance logit for the pair.
    pub logit: f32,
}

/// One pair as a cross-encoder's classifier sees it.
#[derive(Debug, Clone)]
pub struct Represented {
    /// The last layer's [CLS] state, then the mean of its token states.
    pub state: Vec<f32>,
    /// The relevance logit.
    pub logit: f32,
    /// The token states entering the tapped layer, padding left out (`[tokens, hidden]`
    /// row-major); empty when no layer was tapped.
    pub tapped: Vec<f32>,
    /// The shipped reader's probability, where it reads from the tapped layer (or, without a tap,
    /// from the last states): how a trained file is checked against its training script.
    pub probability: Option<f32>,
}

/// Loads the reranker a manifest entry describes, verifying its files first.
pub fn load_reranker(store: &ModelStore, spec: &ModelSpec, options: &RerankOptions) -> Result<Arc<dyn Reranker>> {
    match spec.architecture {
        Architecture::BertCrossEncoder => Ok(Arc::new(CrossEncoder::load(store, spec, options)?)),
        other => Err(Error::Invalid(format!("model `{}` is a {other:?} model, not a reranker", spec.name))),
    }
}
