//! Chunkers: a parsed document's blocks become parent chunks (whole sections, for generation)
//! and child chunks (for retrieval), sized in tokens of the embedding model's tokenizer.
//!
//! May import `types` and `error` only. Every chunk's span gives its text back from the
//! document's normalised text.
//!
//! Four strategies share the [`Chunker`] trait:
//! - [`StructuralChunker`] (`structural`, the default): sections from the heading hierarchy,
//!   atomic blocks kept whole, long prose split at sentence ends;
//! - [`FixedChunker`] (`fixed`): sentence-aware fixed size in characters, overlap in words;
//! - [`SemanticChunker`] (`semantic`): boundaries where consecutive sentences' embeddings drift
//!   apart (needs a [`SentenceEmbedder`]);
//! - [`CodeChunker`] (`code`): code files by syntax unit;
//! - [`WholeChunker`] (`whole`): one child per document (short records, whole-document baselines).
//!
//! Sizes are estimated by counting each block or sentence once and summing while packing; each
//! final chunk's text is then counted exactly once, and re-split only if that exact count exceeds
//! the hard budget.
//!
//! ```
//! use ragbox_core::chunk::{chunker, ChunkOptions, ChunkerKind, WordCounter};
//! use ragbox_core::types::{Block, BlockKind, Lines, ParsedDocument, Span};
//!
//! let text = "# Intro\n\nHello world. Second sentence.".to_string();
//! let doc = ParsedDocument {
//!     parser: "markdown".into(),
//!     title: "t".into(),
//!     blocks: vec![
//!         Block { kind: BlockKind::Heading { level: 1, title: "Intro".into() },
//!                 span: Span::new(0, 7), page: None, lines: Lines { first: 1, last: 1 } },
//!         Block { kind: BlockKind::Paragraph, span: Span::new(9, text.len()), page: None,
//!                 lines: Lines { first: 3, last: 3 } },
//!     ],
//!     text,
//!     metadata: Default::default(),
//! };
//! let kind: ChunkerKind = "structural".parse().unwrap();
//! let chunks = chunker(kind, ChunkOptions::default()).unwrap().chunk(&doc, &WordCounter);
//! assert_eq!(chunks.len(), 2); // one parent, one child
//! assert_eq!(chunks[1].section_path, vec!["Intro".to_string()]);
//! assert_eq!(&doc.text[chunks[1].span.range()], doc.text.as_str());
//! ```

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use unicode_segmentation::UnicodeSegmentation;

use crate::error::{Error, Result};
use crate::types::{Chunk, ParsedDocument};

mod builder;
pub mod code;
pub mod fixed;
pub mod semantic;
pub mod sentence;
mod split;
pub mod structural;
pub mod whole;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod testdoc;

pub use builder::ChunkBuilder;
pub use code::{default_chunker_for, CodeChunker};
pub use fixed::{FixedChunker, FixedOptions};
pub use semantic::{SemanticChunker, SemanticOptions, SentenceEmbedder};
pub use structural::StructuralChunker;
pub use whole::WholeChunker;

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

/// A [`TokenCounter`] for tests and benches: one token per Unicode word and per punctuation mark
/// (UAX#29 word segments that are not whitespace). Close enough to a WordPiece count in shape, and
/// needs no model.
#[derive(Debug, Clone, Copy, Default)]
pub struct WordCounter;

impl TokenCounter for WordCounter {
    fn count(&self, text: &str) -> usize {
        text.split_word_bounds().filter(|w| !w.chars().all(char::is_whitespace)).count()
    }
}

/// Chunk sizes, in tokens of the embedding model's tokenizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ChunkOptions {
    /// Target size of a child chunk; children pack blocks and sentences up to this.
    pub child_tokens: usize,
    /// Hard budget of a child chunk: only one unsplittable run of text (a "word" with no
    /// whitespace in it) may exceed it.
    pub max_child_tokens: usize,
    /// Budget of a parent chunk (a whole section where it fits).
    pub parent_tokens: usize,
    /// Tokens a child reaches back into the previous child of its section (whole sentences).
    pub overlap_tokens: usize,
}

impl Default for ChunkOptions {
    fn default() -> Self {
        ChunkOptions { child_tokens: 256, max_child_tokens: 512, parent_tokens: 2048, overlap_tokens: 0 }
    }
}

impl ChunkOptions {
    /// The options made consistent: every size at least 1, `max_child_tokens >= child_tokens`,
    /// `parent_tokens >= max_child_tokens`. Chunkers apply this on construction.
    pub fn normalised(self) -> Self {
        let child_tokens = self.child_tokens.max(1);
        let max_child_tokens = self.max_child_tokens.max(child_tokens);
        let parent_tokens = self.parent_tokens.max(max_child_tokens);
        ChunkOptions { child_tokens, max_child_tokens, parent_tokens, overlap_tokens: self.overlap_tokens }
    }
}

/// Which chunking strategy to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ChunkerKind {
    /// Sections, atomic blocks, sentences ([`StructuralChunker`]).
    #[default]
    Structural,
    /// Sentence-aware fixed size ([`FixedChunker`]).
    Fixed,
    /// Embedding-based boundaries ([`SemanticChunker`]).
    Semantic,
    /// Syntax units of code files ([`CodeChunker`]).
    Code,
    /// One child per document ([`WholeChunker`]).
    Whole,
}

impl ChunkerKind {
    /// Every kind, in the order the names are listed.
    pub const ALL: [ChunkerKind; 5] =
        [ChunkerKind::Structural, ChunkerKind::Fixed, ChunkerKind::Semantic, ChunkerKind::Code, ChunkerKind::Whole];

    /// The name on the command line and in the catalog.
    pub fn name(self) -> &'static str {
        match self {
            ChunkerKind::Structural => "structural",
            ChunkerKind::Fixed => "fixed",
            ChunkerKind::Semantic => "semantic",
            ChunkerKind::Code => "code",
            ChunkerKind::Whole => "whole",
        }
    }
}

impl fmt::Display for ChunkerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ChunkerKind {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let wanted = s.trim();
        ChunkerKind::ALL.into_iter().find(|k| k.name().eq_ignore_ascii_case(wanted)).ok_or_else(|| {
            let names: Vec<&str> = ChunkerKind::ALL.iter().map(|k| k.name()).collect();
            Error::Invalid(format!("unknown chunker `{s}`; known chunkers: {}", names.join(", ")))
        })
    }
}

/// The chunker of `kind`, for the kinds that need no embedder. `Semantic` needs a
/// [`SentenceEmbedder`]: build it with [`SemanticChunker::new`]; asking for it here is an
/// [`Error::Invalid`]. `Fixed` gets [`FixedOptions::default`] (500 characters, 50 words of overlap)
/// and the hard token budget of `options`.
pub fn chunker(kind: ChunkerKind, options: ChunkOptions) -> Result<Box<dyn Chunker>> {
    match kind {
        ChunkerKind::Structural => Ok(Box::new(StructuralChunker::new(options))),
        ChunkerKind::Fixed => Ok(Box::new(FixedChunker::new(FixedOptions::default(), options))),
        ChunkerKind::Code => Ok(Box::new(CodeChunker::new(options))),
        ChunkerKind::Whole => Ok(Box::new(WholeChunker)),
        ChunkerKind::Semantic => Err(Error::Invalid(
            "the semantic chunker needs a sentence embedder; build it with SemanticChunker::new".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The module doc example, run as a unit test.
    #[test]
    fn module_example() {
        use crate::types::{Block, BlockKind, Lines, Span};
        let text = "# Intro\n\nHello world. Second sentence.".to_string();
        let doc = ParsedDocument {
            parser: "markdown".into(),
            title: "t".into(),
            blocks: vec![
                Block {
                    kind: BlockKind::Heading { level: 1, title: "Intro".into() },
                    span: Span::new(0, 7),
                    page: None,
                    lines: Lines { first: 1, last: 1 },
                },
                Block {
                    kind: BlockKind::Paragraph,
                    span: Span::new(9, text.len()),
                    page: None,
                    lines: Lines { first: 3, last: 3 },
                },
            ],
            text,
            metadata: Default::default(),
        };
        let kind: ChunkerKind = "structural".parse().unwrap();
        let chunks = chunker(kind, ChunkOptions::default()).unwrap().chunk(&doc, &WordCounter);
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks[1].section_path, vec!["Intro".to_string()]);
        assert_eq!(&doc.text[chunks[1].span.range()], doc.text.as_str());
        let text = "Dr. Smith paid 3.14 e.g. Euros. Then left.";
        let parts: Vec<&str> = sentence::sentences(text).into_iter().map(|r| &text[r]).collect();
        assert_eq!(parts, ["Dr. Smith paid 3.14 e.g. Euros. ", "Then left."]);
    }

    #[test]
    fn kinds_parse_from_their_names() {
        for k in ChunkerKind::ALL {
            assert_eq!(k.name().parse::<ChunkerKind>().unwrap(), k);
            assert_eq!(k.to_string(), k.name());
        }
        assert_eq!(" Fixed ".parse::<ChunkerKind>().unwrap(), ChunkerKind::Fixed);
        let e = "bogus".parse::<ChunkerKind>().unwrap_err().to_string();
        assert!(e.contains("structural, fixed, semantic, code, whole"), "{e}");
    }

    #[test]
    fn chunker_builds_the_embedder_free_kinds() {
        for k in [ChunkerKind::Structural, ChunkerKind::Fixed, ChunkerKind::Code, ChunkerKind::Whole] {
            assert_eq!(chunker(k, ChunkOptions::default()).unwrap().name(), k.name());
        }
        assert!(chunker(ChunkerKind::Semantic, ChunkOptions::default()).is_err());
    }

    #[test]
    fn word_counter_counts_words_and_punctuation() {
        assert_eq!(WordCounter.count(""), 0);
        assert_eq!(WordCounter.count("Hello, world!"), 4);
        assert_eq!(WordCounter.count("3.14 is pi"), 3);
        assert_eq!(WordCounter.count("café 中文 🦀"), 4);
    }

    #[test]
    fn options_normalise_to_a_consistent_order() {
        let o = ChunkOptions { child_tokens: 0, max_child_tokens: 0, parent_tokens: 0, overlap_tokens: 3 }
            .normalised();
        assert_eq!((o.child_tokens, o.max_child_tokens, o.parent_tokens, o.overlap_tokens), (1, 1, 1, 3));
    }
}
