//! The semantic chunker (`semantic`): child boundaries where the meaning shifts, found from
//! sentence embeddings (LangChain's `SemanticChunker`, "percentile" method).
//!
//! Imports `types` and `error` (and its sibling modules).
//!
//! Within each segment (a heading and its blocks, as in [`super::structural`]), prose is cut into
//! sentences and atomic blocks stay whole (split on lines only over `max_child_tokens`). Each unit
//! is embedded together with `buffer_size` neighbours on each side (within its segment); the
//! cosine distance between consecutive units is computed, and a child ends wherever that distance
//! is above the `breakpoint_percentile`-th percentile of all the document's distances (linear
//! interpolation, as numpy's `percentile`). Children also end at segment boundaries and before
//! they would exceed `max_child_tokens`; a heading stays with what follows it. Parents and
//! overlap are those of the structural chunker.
//!
//! Errors: [`SentenceEmbedder::embed_sentences`] is fallible. [`SemanticChunker::try_chunk`]
//! returns the error; [`Chunker::chunk`] logs it and falls back to the structural chunker with the
//! same sizes, so ingest never stops on an embedding failure.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::types::{cosine, Chunk, ParsedDocument};

use super::builder::ChunkBuilder;
use super::split::{self, finalize, Packed, Piece};
use super::structural::{emit, pieces, segments, StructuralChunker};
use super::{ChunkOptions, Chunker, TokenCounter};

/// Embeds sentences for boundary detection (the app adapts its embedder to this).
pub trait SentenceEmbedder: Send + Sync {
    /// One vector per sentence, in order. Vectors need not be normalised.
    fn embed_sentences(&self, sentences: &[&str]) -> Result<Vec<Vec<f32>>>;
}

/// Settings of the semantic chunker.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SemanticOptions {
    /// A boundary falls where the distance between consecutive sentences exceeds this percentile
    /// (0-100) of the document's distances.
    pub breakpoint_percentile: f64,
    /// Neighbours on each side embedded with each sentence, to smooth the signal (LangChain: 1).
    pub buffer_size: usize,
}

impl Default for SemanticOptions {
    fn default() -> Self {
        SemanticOptions { breakpoint_percentile: 95.0, buffer_size: 1 }
    }
}

/// Embedding-based boundaries. See the module docs.
#[derive(Clone)]
pub struct SemanticChunker {
    options: ChunkOptions,
    semantic: SemanticOptions,
    embedder: Arc<dyn SentenceEmbedder>,
}

impl std::fmt::Debug for SemanticChunker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SemanticChunker")
            .field("options", &self.options)
            .field("semantic", &self.semantic)
            .finish()
    }
}

impl SemanticChunker {
    /// A semantic chunker with these sizes and settings, embedding with `embedder`.
    pub fn new(
        options: ChunkOptions,
        semantic: SemanticOptions,
        embedder: Arc<dyn SentenceEmbedder>,
    ) -> Self {
        SemanticChunker { options: options.normalised(), semantic, embedder }
    }

    /// The document's chunks, or the embedder's error (or [`Error::Bug`] when it returns the wrong
    /// number of vectors).
    pub fn try_chunk(&self, doc: &ParsedDocument, tokens: &dyn TokenCounter) -> Result<Vec<Chunk>> {
        let o = self.options;
        let mut b = ChunkBuilder::new(doc, tokens);
        let segs = segments(doc);
        let units: Vec<Vec<Piece>> =
            segs.iter().map(|seg| pieces(&b, seg.blocks.clone(), o.max_child_tokens, None)).collect();

        // Texts to embed: each unit with its neighbours, within its segment.
        let buffer = self.semantic.buffer_size;
        let mut texts: Vec<&str> = Vec::new();
        for seg in units.iter().filter(|u| u.len() > 1) {
            for i in 0..seg.len() {
                let (lo, hi) = (i.saturating_sub(buffer), (i + buffer).min(seg.len() - 1));
                texts.push(&doc.text[seg[lo].span.start..seg[hi].span.end]);
            }
        }
        let vectors = if texts.is_empty() { Vec::new() } else { self.embedder.embed_sentences(&texts)? };
        if vectors.len() != texts.len() {
            return Err(Error::Bug(format!(
                "sentence embedder returned {} vectors for {} sentences",
                vectors.len(),
                texts.len()
            )));
        }
        // Distances between consecutive units, per segment.
        let mut distances: Vec<Vec<f64>> = Vec::with_capacity(units.len());
        let mut at = 0;
        for seg in &units {
            if seg.len() > 1 {
                let v = &vectors[at..at + seg.len()];
                distances.push(v.windows(2).map(|w| 1.0 - f64::from(cosine(&w[0], &w[1]))).collect());
                at += seg.len();
            } else {
                distances.push(Vec::new());
            }
        }
        let mut all: Vec<f64> = distances.iter().flatten().copied().collect();
        let threshold = percentile(&mut all, self.semantic.breakpoint_percentile);

        let children: Vec<Vec<Packed>> = units
            .iter()
            .zip(&distances)
            .map(|(seg, dist)| {
                let groups = group(seg, dist, threshold, o.max_child_tokens);
                let mut packed = finalize(&b, seg, groups, o.max_child_tokens);
                split::overlap(&b, &mut packed, o.overlap_tokens, o.max_child_tokens);
                packed
            })
            .collect();
        emit(&mut b, &segs, &children, o.parent_tokens);
        Ok(b.finish())
    }
}

impl Chunker for SemanticChunker {
    fn name(&self) -> &'static str {
        "semantic"
    }

    #[tracing::instrument(skip_all, fields(chunker = "semantic", title = %doc.title))]
    fn chunk(&self, doc: &ParsedDocument, tokens: &dyn TokenCounter) -> Vec<Chunk> {
        match self.try_chunk(doc, tokens) {
            Ok(chunks) => chunks,
            Err(error) => {
                tracing::warn!(%error, title = %doc.title, "semantic chunking failed; using structural chunking");
                StructuralChunker::new(self.options).chunk(doc, tokens)
            }
        }
    }
}

/// Groups of consecutive units: a new group where the distance before a unit exceeds
/// `threshold` (not right after a heading), or where the unit would take the group over `max`.
fn group(units: &[Piece], distances: &[f64], threshold: f64, max: usize) -> Vec<std::ops::Range<usize>> {
    let mut groups = Vec::new();
    let mut start = 0;
    let mut sum = 0;
    for (i, u) in units.iter().enumerate() {
        if i > start {
            let shift = distances.get(i - 1).is_some_and(|d| *d > threshold) && !units[i - 1].glue_next;
            if shift || sum + u.tokens > max {
                groups.push(start..i);
                start = i;
                sum = 0;
            }
        }
        sum += u.tokens;
    }
    if start < units.len() {
        groups.push(start..units.len());
    }
    groups
}

/// The `p`-th percentile (0-100) of `values`, interpolated linearly (numpy's default); infinity
/// when there are none.
fn percentile(values: &mut [f64], p: f64) -> f64 {
    if values.is_empty() {
        return f64::INFINITY;
    }
    values.sort_by(f64::total_cmp);
    let rank = (p.clamp(0.0, 100.0) / 100.0) * (values.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    values[lo] + (values[hi] - values[lo]) * (rank - lo as f64)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::chunk::testdoc::md;
    use crate::chunk::WordCounter;
    use crate::types::ChunkRole;

    /// A fake embedder: one dimension per topic word; a text's vector counts the topic words in it.
    pub(crate) struct TopicEmbedder;

    pub(crate) const TOPICS: [&str; 4] = ["cats", "taxes", "rockets", "soup"];

    impl SentenceEmbedder for TopicEmbedder {
        fn embed_sentences(&self, sentences: &[&str]) -> Result<Vec<Vec<f32>>> {
            Ok(sentences
                .iter()
                .map(|s| {
                    let mut v: Vec<f32> = TOPICS.iter().map(|t| s.matches(t).count() as f32).collect();
                    v.push(0.01); // never the zero vector
                    v
                })
                .collect())
        }
    }

    struct FailingEmbedder;

    impl SentenceEmbedder for FailingEmbedder {
        fn embed_sentences(&self, _: &[&str]) -> Result<Vec<Vec<f32>>> {
            Err(Error::Invalid("no model".into()))
        }
    }

    fn paragraph(topic: &str, n: usize) -> String {
        (0..n).map(|i| format!("Here is fact {i} about {topic} today.")).collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn percentile_interpolates_like_numpy() {
        assert_eq!(percentile(&mut [1.0, 2.0, 3.0, 4.0, 5.0], 50.0), 3.0);
        assert!((percentile(&mut [4.0, 1.0, 2.0, 3.0], 95.0) - 3.85).abs() < 1e-9);
        assert_eq!(percentile(&mut [], 95.0), f64::INFINITY);
    }

    #[test]
    fn boundaries_land_at_topic_changes() {
        let text = format!(
            "# Notes\n\n{} {} {}",
            paragraph("cats", 6),
            paragraph("taxes", 6),
            paragraph("rockets", 6)
        );
        let doc = md(&text);
        let semantic = SemanticOptions { breakpoint_percentile: 90.0, buffer_size: 1 };
        let chunker = SemanticChunker::new(ChunkOptions::default(), semantic, Arc::new(TopicEmbedder));
        let chunks = chunker.try_chunk(&doc, &WordCounter).unwrap();
        let kids: Vec<&str> =
            chunks.iter().filter(|c| c.role == ChunkRole::Child).map(|c| &doc.text[c.span.range()]).collect();
        assert_eq!(kids.len(), 3, "{kids:#?}");
        assert!(kids[0].starts_with("# Notes") && kids[0].ends_with("about cats today."));
        assert!(kids[1].starts_with("Here is fact 0 about taxes") && kids[1].ends_with("about taxes today."));
        assert!(kids[2].starts_with("Here is fact 0 about rockets"));
    }

    #[test]
    fn the_default_percentile_breaks_at_the_one_topic_change() {
        let doc = md(&format!("{} {}", paragraph("soup", 8), paragraph("rockets", 8)));
        let chunker = SemanticChunker::new(
            ChunkOptions::default(),
            SemanticOptions::default(),
            Arc::new(TopicEmbedder),
        );
        let chunks = chunker.try_chunk(&doc, &WordCounter).unwrap();
        let kids: Vec<&str> =
            chunks.iter().filter(|c| c.role == ChunkRole::Child).map(|c| &doc.text[c.span.range()]).collect();
        assert_eq!(kids, [paragraph("soup", 8) + " ", paragraph("rockets", 8)].map(|s| s.trim().to_string()));
    }

    #[test]
    fn the_hard_budget_still_applies() {
        let doc = md(&paragraph("cats", 40));
        let o = ChunkOptions { child_tokens: 20, max_child_tokens: 30, ..ChunkOptions::default() };
        let chunks = SemanticChunker::new(o, SemanticOptions::default(), Arc::new(TopicEmbedder))
            .chunk(&doc, &WordCounter);
        assert!(chunks.iter().filter(|c| c.role == ChunkRole::Child).count() > 5);
        assert!(chunks.iter().filter(|c| c.role == ChunkRole::Child).all(|c| c.tokens <= 30));
    }

    #[test]
    fn an_embedding_failure_falls_back_to_structural() {
        let doc = md(&format!("# A\n\n{}", paragraph("cats", 3)));
        let semantic = SemanticChunker::new(
            ChunkOptions::default(),
            SemanticOptions::default(),
            Arc::new(FailingEmbedder),
        );
        assert!(semantic.try_chunk(&doc, &WordCounter).is_err());
        let structural = StructuralChunker::new(ChunkOptions::default()).chunk(&doc, &WordCounter);
        assert_eq!(semantic.chunk(&doc, &WordCounter), structural);
    }
}
