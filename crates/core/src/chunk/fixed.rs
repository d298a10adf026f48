//! The fixed-size chunker (`fixed`): sentence-aware fixed size in characters, with overlap in
//! words, as deployments that size chunks by characters do (500 characters, 50 words of overlap).
//!
//! Imports `types` only (and its sibling modules).
//!
//! Every block is cut into sentences ([`super::sentence`]); chunks pack whole sentences, across
//! block and section boundaries, while the chunk stays within `chars` characters (Unicode scalar
//! values) and the hard token budget. A sentence longer than `chars` is a chunk of its own, cut on
//! whitespace only where it exceeds `max_child_tokens`. Each chunk after the first starts up to
//! `overlap_words` whitespace-separated words back into the previous chunk (never all of it); the
//! overlap counts toward `chars` and shrinks (to none) so that the first new sentence still fits.
//! Chunks are children with no parent; `section_path` is the breadcrumb of the nearest heading above the
//! chunk's first byte.

use crate::types::{Chunk, ChunkRole, ParsedDocument, Span};

use super::builder::ChunkBuilder;
use super::split::{self, Piece};
use super::structural::block_paths;
use super::{ChunkOptions, Chunker, TokenCounter};

/// Sizes of the fixed chunker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedOptions {
    /// Characters per chunk (Unicode scalar values), overlap included.
    pub chars: usize,
    /// Words of the previous chunk a chunk starts with.
    pub overlap_words: usize,
}

impl Default for FixedOptions {
    fn default() -> Self {
        FixedOptions { chars: 500, overlap_words: 50 }
    }
}

/// Sentence-aware fixed size. See the module docs.
#[derive(Debug, Clone, Copy)]
pub struct FixedChunker {
    fixed: FixedOptions,
    max_child_tokens: usize,
}

impl FixedChunker {
    /// A fixed chunker; of `options` only the hard budget `max_child_tokens` applies.
    pub fn new(fixed: FixedOptions, options: ChunkOptions) -> Self {
        let fixed = FixedOptions { chars: fixed.chars.max(1), ..fixed };
        FixedChunker { fixed, max_child_tokens: options.normalised().max_child_tokens }
    }
}

impl Chunker for FixedChunker {
    fn name(&self) -> &'static str {
        "fixed"
    }

    #[tracing::instrument(skip_all, fields(chunker = "fixed", title = %doc.title))]
    fn chunk(&self, doc: &ParsedDocument, tokens: &dyn TokenCounter) -> Vec<Chunk> {
        let max = self.max_child_tokens;
        let limit = self.fixed.chars;
        let mut b = ChunkBuilder::new(doc, tokens);
        let text = doc.text.as_str();
        let mut units: Vec<Piece> = Vec::new();
        for block in &doc.blocks {
            split::split(&b, block.span, max, &[split::Level::Sentences, split::Level::Words], &mut units);
        }
        let paths = block_paths(doc);
        let chars = |s: usize, e: usize| text[s..e].chars().count();
        let mut i = 0;
        let mut prev: Option<Span> = None;
        while i < units.len() {
            let first = units[i].span;
            let mut start = first.start;
            if let Some(prev) = prev {
                let words = word_starts(&text[prev.range()], self.fixed.overlap_words);
                let first_chars = chars(prev.end, first.end);
                // `words` is nearest first: take the farthest start that still fits.
                // Never the whole previous chunk: a chunk starts after its predecessor.
                for &w in words.iter().rev().filter(|&&w| w > 0) {
                    if chars(prev.start + w, prev.end) + first_chars <= limit {
                        start = prev.start + w;
                        break;
                    }
                }
            }
            let mut used = chars(start, first.end);
            let mut est = units[i].tokens;
            let mut j = i + 1;
            while j < units.len() {
                let add = chars(units[j - 1].span.end, units[j].span.end);
                if used + add > limit || est + units[j].tokens > max {
                    break;
                }
                used += add;
                est += units[j].tokens;
                j += 1;
            }
            let mut span = Span::new(start, units[j - 1].span.end);
            let mut count = b.count(span);
            if count > max && start < first.start {
                start = first.start;
                span = Span::new(start, span.end);
                count = b.count(span);
            }
            while count > max && j - 1 > i {
                j -= 1;
                span = Span::new(start, units[j - 1].span.end);
                count = b.count(span);
            }
            let block = doc
                .blocks
                .partition_point(|bl| bl.span.end <= span.start)
                .min(doc.blocks.len().saturating_sub(1));
            let path = paths.get(block).map(|p| p.as_ref().clone()).unwrap_or_default();
            b.push(ChunkRole::Child, None, path, span, count);
            prev = Some(span);
            i = j;
        }
        b.finish()
    }
}

/// Byte offsets of the starts of the last `n` whitespace-separated words of `s`, nearest the end
/// first.
fn word_starts(s: &str, n: usize) -> Vec<usize> {
    let mut out = Vec::with_capacity(n);
    if n == 0 {
        return out;
    }
    let mut in_word = false;
    let mut last_start = s.len();
    for (i, c) in s.char_indices().rev() {
        if c.is_whitespace() {
            if in_word {
                out.push(last_start);
                if out.len() == n {
                    return out;
                }
            }
            in_word = false;
        } else {
            in_word = true;
            last_start = i;
        }
    }
    if in_word {
        out.push(last_start);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::testdoc::md;
    use crate::chunk::WordCounter;

    fn run(text: &str, fixed: FixedOptions, max: usize) -> (ParsedDocument, Vec<Chunk>) {
        let doc = md(text);
        let o = ChunkOptions { max_child_tokens: max, child_tokens: max.min(256), ..ChunkOptions::default() };
        let chunks = FixedChunker::new(fixed, o).chunk(&doc, &WordCounter);
        (doc, chunks)
    }

    #[test]
    fn word_starts_from_the_end() {
        assert_eq!(word_starts("ab cd  ef", 2), vec![7, 3]);
        assert_eq!(word_starts("ab cd", 5), vec![3, 0]);
        assert!(word_starts("ab", 0).is_empty());
    }

    #[test]
    fn packs_whole_sentences_up_to_the_character_limit() {
        let text = (0..30).map(|i| format!("Sentence number {i} is short.")).collect::<Vec<_>>().join(" ");
        let (doc, chunks) = run(&text, FixedOptions { chars: 100, overlap_words: 0 }, 512);
        assert!(chunks.len() > 5);
        for pair in chunks.windows(2) {
            assert!(pair[0].span.end <= pair[1].span.start);
        }
        for c in &chunks {
            let t = &doc.text[c.span.range()];
            assert!(t.chars().count() <= 100, "{t}");
            assert!(t.starts_with("Sentence") && t.ends_with("short."), "{t}");
            assert_eq!(c.role, ChunkRole::Child);
            assert_eq!(c.parent, None);
        }
    }

    #[test]
    fn overlap_starts_words_back_and_counts_toward_the_limit() {
        let text = (0..30).map(|i| format!("Sentence number {i} is short.")).collect::<Vec<_>>().join(" ");
        let (doc, chunks) = run(&text, FixedOptions { chars: 120, overlap_words: 3 }, 512);
        for pair in chunks.windows(2) {
            let tail: Vec<&str> = doc.text[pair[0].span.range()].split_whitespace().rev().take(3).collect();
            let head: Vec<&str> = doc.text[pair[1].span.range()].split_whitespace().take(3).collect();
            assert_eq!(tail.into_iter().rev().collect::<Vec<_>>(), head);
            assert!(doc.text[pair[1].span.range()].chars().count() <= 120);
        }
    }

    #[test]
    fn a_long_sentence_is_its_own_chunk_and_splits_only_over_the_token_budget() {
        let long = "word ".repeat(150);
        let text = format!("Short one. Word {}end. Short two.", long);
        let (doc, chunks) = run(&text, FixedOptions { chars: 100, overlap_words: 0 }, 512);
        assert_eq!(chunks.len(), 3);
        assert!(doc.text[chunks[1].span.range()].starts_with("Word word"));
        let (_, chunks) = run(&text, FixedOptions { chars: 100, overlap_words: 0 }, 40);
        assert!(chunks.len() > 4);
        assert!(chunks.iter().all(|c| c.tokens <= 40));
    }

    #[test]
    fn section_path_is_the_nearest_heading_above() {
        let (_, chunks) =
            run("# A\n\nOne.\n\n## B\n\nTwo.", FixedOptions { chars: 6, overlap_words: 0 }, 512);
        let paths: Vec<Vec<String>> = chunks.iter().map(|c| c.section_path.clone()).collect();
        assert_eq!(paths[0], vec!["A"]);
        assert_eq!(paths.last().unwrap(), &vec!["A".to_string(), "B".to_string()]);
    }
}
