//! Plain data shared by every layer: text kinds, embeddings, model roles, parsed documents and
//! their blocks, chunks, ids and spans.
//!
//! Imports nothing from the crate; everything else may import it.

use std::collections::BTreeMap;

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
    /// Scanned page to text (optical character recognition).
    Ocr,
}

impl std::fmt::Display for ModelRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ModelRole::Embed => "embed",
            ModelRole::Rerank => "rerank",
            ModelRole::Generate => "generate",
            ModelRole::Ocr => "ocr",
        })
    }
}

/// A document's id in the catalog.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DocId(pub u64);

/// A chunk's id in the catalog; also its key in the vector and lexical indexes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ChunkId(pub u64);

/// A half-open byte range `start..end` into a document's normalised text (UTF-8; both ends lie on
/// character boundaries). `&text[span.range()]` gives the spanned text back exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Span {
    /// First byte.
    pub start: usize,
    /// One past the last byte.
    pub end: usize,
}

impl Span {
    /// The span `start..end`.
    pub fn new(start: usize, end: usize) -> Self {
        debug_assert!(start <= end, "span {start}..{end} runs backwards");
        Span { start, end }
    }

    /// As a range, for slicing.
    pub fn range(&self) -> std::ops::Range<usize> {
        self.start..self.end
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    /// Whether the span covers nothing.
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// The smallest span covering both.
    pub fn cover(&self, other: Span) -> Span {
        Span::new(self.start.min(other.start), self.end.max(other.end))
    }
}

/// An inclusive, 1-based range of lines in the normalised text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lines {
    /// First line (1-based).
    pub first: u32,
    /// Last line (inclusive).
    pub last: u32,
}

/// What a block of a document is. Tables, lists, code and definitions are atomic: a chunker never
/// splits one unless it alone exceeds the chunk budget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum BlockKind {
    /// A heading; `level` 1 is the top. `title` is its text without markup.
    Heading {
        /// 1 (top) to 6.
        level: u8,
        /// The heading text, markup removed.
        title: String,
    },
    /// Running text.
    Paragraph,
    /// A whole list (one unit).
    List,
    /// A table, header row included in its span.
    Table,
    /// Source code: a fenced block, or one syntax unit (function, class...) of a code file.
    Code {
        /// Language, when known.
        language: Option<String>,
        /// The unit's name (function, class...), for code files.
        symbol: Option<String>,
    },
    /// Quoted text (block quote, a quoted e-mail reply).
    Quote,
    /// A term and its definition.
    Definition,
}

impl BlockKind {
    /// Whether chunkers must keep the block whole.
    pub fn is_atomic(&self) -> bool {
        matches!(self, BlockKind::List | BlockKind::Table | BlockKind::Code { .. } | BlockKind::Definition)
    }
}

/// One structural unit of a parsed document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Block {
    /// What it is.
    #[serde(flatten)]
    pub kind: BlockKind,
    /// Where it lies in the normalised text.
    pub span: Span,
    /// Page number (1-based), for paged formats.
    pub page: Option<u32>,
    /// Lines of the normalised text it covers.
    pub lines: Lines,
}

/// A document as a parser leaves it: normalised text (what citations point into) and its blocks in
/// reading order. Blocks never overlap and lie inside `text`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParsedDocument {
    /// The format's parser name (`markdown`, `text`, `html`, `email`, `pdf`, `code`...).
    pub parser: String,
    /// Title: front matter, first heading, `<title>`, e-mail subject, or the file name.
    pub title: String,
    /// Normalised text: LF line ends, no NULs, valid UTF-8.
    pub text: String,
    /// Blocks in reading order.
    pub blocks: Vec<Block>,
    /// Format metadata (front matter keys, e-mail From/To/Date/Subject...).
    pub metadata: BTreeMap<String, String>,
}

/// Whether a chunk is a parent (a whole section, given to the LLM) or a child (retrieved).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChunkRole {
    /// A whole section (up to the parent budget), for generation.
    Parent,
    /// A retrieval unit.
    Child,
}

/// A chunk of a document before it is stored: everything but its ids. Its text is
/// `&document.text[span.range()]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chunk {
    /// Position among the document's chunks (0-based, parents and children in one sequence).
    pub ordinal: u32,
    /// Parent or child.
    pub role: ChunkRole,
    /// For a child: the ordinal of its parent chunk, when it has one.
    pub parent: Option<u32>,
    /// Heading breadcrumb, outermost first ("Policy", "4 Travel", "4.2 Insurance").
    pub section_path: Vec<String>,
    /// Where its text lies in the normalised document text.
    pub span: Span,
    /// Page of its first byte, for paged formats.
    pub page: Option<u32>,
    /// Lines it covers.
    pub lines: Lines,
    /// Length in tokens of the embedding model's tokenizer.
    pub tokens: usize,
}

/// The text that is embedded and indexed for BM25 for a child chunk: its situating context (title
/// and section path, or an LLM's note), a blank line, then the chunk's own text.
pub fn indexed_text(context: &str, text: &str) -> String {
    if context.is_empty() {
        text.to_string()
    } else {
        format!("{context}\n\n{text}")
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

/// sha256 of an embedded text: the embedding cache's key (with the model id), and the
/// annotation cache's.
pub type TextHash = [u8; 32];

/// The sha256 of `text`.
pub fn text_hash(text: &str) -> TextHash {
    use sha2::Digest;
    sha2::Sha256::digest(text.as_bytes()).into()
}
