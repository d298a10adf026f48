//! Chunkers: a parsed document's blocks become parent chunks (whole sections, for generation)
//! and child chunks (for retrieval), sized in tokens of the embedding model's tokenizer.
//!
//! May import `types` and `error` only. Every chunk's span gives its text back from the
//! document's normalised text.

use crate::types::{Chunk, ParsedDocument};

/// Counts tokens the way the embedding model will (the app wires in the model's tokenizer).
pub trait TokenCounter: Send + Sync {
    /// Tokens in `text`, special tokens excluded.
    fn count(&self, text: &str) -> usize;
}

/// Splits a parsed document into chunks.
pub trait Chunker: Send + Sync {
    /// The name used on the command line (`--chunker`) and stored in the catalog.
    fn name(&self) -> &'static str;
    /// The document's chunks, parents and children, in ordinal order.
    fn chunk(&self, doc: &ParsedDocument, tokens: &dyn TokenCounter) -> Vec<Chunk>;
}
