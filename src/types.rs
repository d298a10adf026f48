//! Plain data shared by every layer: text kinds, embeddings, model roles.
//!
//! Imports nothing from the crate; everything else may import it.

use serde::{Deserialize, Serialize};

/// Whether a text is a search query or a passage to be found; asymmetric models embed them with
/// different prefixes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TextKind {
    /// A question or search string.
    Query,
    /// A chunk of a document.
    Passage,
}

/// One text's embedding, with what the tokenizer did to it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Embedding {
    /// L2-normalised vector.
    pub vector: Vec<f32>,
    /// Tokens the model saw (special tokens included).
    pub tokens: usize,
    /// When the text was longer than the model's limit: its full length in tokens.
    pub truncated_from: Option<usize>,
}

/// What a model is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelRole {
    /// Text to vector.
    Embed,
    /// (query, passage) to relevance score.
    Rerank,
    /// Text generation.
    Generate,
}

impl std::fmt::Display for ModelRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ModelRole::Embed => "embed",
            ModelRole::Rerank => "rerank",
            ModelRole::Generate => "generate",
        })
    }
}

/// Cosine similarity of two vectors (not assumed normalised).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let (mut dot, mut na, mut nb) = (0f64, 0f64, 0f64);
    for (x, y) in a.iter().zip(b) {
        dot += f64::from(*x) * f64::from(*y);
        na += f64::from(*x) * f64::from(*x);
        nb += f64::from(*y) * f64::from(*y);
    }
    if na == 0.0 || nb == 0.0 {
        return 0.0;
    }
    (dot / (na.sqrt() * nb.sqrt())) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cosine_of_parallel_and_orthogonal_vectors() {
        assert!((cosine(&[1.0, 2.0], &[2.0, 4.0]) - 1.0).abs() < 1e-6);
        assert!(cosine(&[1.0, 0.0], &[0.0, 3.0]).abs() < 1e-6);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 1.0]), 0.0);
    }
}
