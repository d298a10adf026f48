//! ragbox-eval: how well the pipeline retrieves and answers, measured. Retrieval on BEIR-format
//! data (metrics, data loading, plots, the runner); the answer evaluations ([`answers`], [`qa`],
//! [`conversations`]) ask through the whole answer path; [`support`] scores the support check;
//! [`reader_features`] writes the reader's training material as the answer step reads it.
//! The measuring tools (`ragbox eval`, `ragbox bench`) drive it; nothing in the product depends
//! on it.

#![warn(missing_docs)]

use std::sync::Arc;

use ragbox_core::embed::Embedder;
use ragbox_core::generate::Generator;
use ragbox_core::rerank::Reranker;

pub mod answers;
pub mod beir;
pub mod conversations;
pub mod metrics;
pub mod plot;
pub mod qa;
pub mod reader_features;
pub mod run;
pub mod support;

/// The models an answer evaluation asks with: the index's embedder, the generator, and the
/// reranker if one is configured.
#[derive(Clone)]
pub struct AnswerModels {
    /// The embedder the evaluation's index is built with.
    pub embedder: Arc<dyn Embedder>,
    /// The model that writes the answers.
    pub generator: Arc<dyn Generator>,
    /// The cross-encoder, if one reranks.
    pub reranker: Option<Arc<dyn Reranker>>,
}
