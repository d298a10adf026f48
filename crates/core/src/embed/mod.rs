//! Text to vectors: the [`Embedder`] seam and the candle transformer embedders behind it.
//!
//! May import `model`, `types` and `error`. The embedders here tokenise (with the model's own
//! tokenizer and an explicit limit), batch by length, run the encoder on the chosen device, pool
//! and L2-normalise.
//!
//! ```
//! use ragbox_core::embed::Embedder;
//! use ragbox_core::testing::HashEmbedder;
//! use ragbox_core::types::TextKind;
//! let e = HashEmbedder::default();
//! let v = e.embed(&["hello world"], TextKind::Query).unwrap();
//! assert_eq!(v[0].vector.len(), e.dims());
//! ```

pub mod bert;
mod nomic;
pub mod pooling;
mod transformer;

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::model::{Architecture, ModelSpec, ModelStore};
use crate::types::{Embedding, TextKind};

pub use transformer::{EmbedOptions, TransformerEmbedder};

/// Turns texts into L2-normalised vectors.
pub trait Embedder: Send + Sync {
    /// Stamped into the index metadata; an index built by another model will not open.
    fn model_id(&self) -> &str;
    /// Vector length.
    fn dims(&self) -> usize;
    /// Longest input in tokens; longer inputs are truncated and say so in [`Embedding::truncated_from`].
    fn max_tokens(&self) -> usize;
    /// Tokens in `text` by the model's tokenizer, special tokens and prefixes excluded (chunk
    /// budgets are counted with it).
    fn count_tokens(&self, text: &str) -> usize;
    /// Embeds `texts` (non-empty each), in input order.
    fn embed(&self, texts: &[&str], kind: TextKind) -> Result<Vec<Embedding>>;

    /// Embeds one text.
    fn embed_one(&self, text: &str, kind: TextKind) -> Result<Embedding> {
        self.embed(&[text], kind)?
            .pop()
            .ok_or_else(|| Error::Bug("embedder returned no vector for one text".into()))
    }
}

/// Loads the embedder a manifest entry describes, verifying its files first.
pub fn load_embedder(store: &ModelStore, spec: &ModelSpec, options: &EmbedOptions) -> Result<Arc<dyn Embedder>> {
    Ok(Arc::new(load_transformer(store, spec, options)?))
}

/// Like [`load_embedder`], keeping the concrete type (for token-level inspection).
pub fn load_transformer(store: &ModelStore, spec: &ModelSpec, options: &EmbedOptions) -> Result<TransformerEmbedder> {
    Ok(match spec.architecture {
        Architecture::Bert => bert::load(store, spec, options)?,
        Architecture::NomicBert => nomic::load(store, spec, options)?,
        other => {
            return Err(Error::Invalid(format!(
                "model `{}` is a {other:?} model, not an embedder; embedders: {}",
                spec.name,
                store
                    .manifest()
                    .by_role(crate::types::ModelRole::Embed)
                    .map(|m| m.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )))
        }
    })
}

/// Rejects empty or blank texts, naming the first.
pub(crate) fn check_texts(texts: &[&str]) -> Result<()> {
    match texts.iter().position(|t| t.trim().is_empty()) {
        Some(i) => Err(Error::Invalid(format!(
            "text {} of {} is empty; there is nothing to embed",
            i + 1,
            texts.len()
        ))),
        None => Ok(()),
    }
}
