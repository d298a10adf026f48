//! [`ChunkBuilder`]: the bookkeeping every chunker shares. It hands out ordinals in push order,
//! computes a span's lines and page, and counts a chunk's final text exactly.
//!
//! Imports `types` only (and the [`TokenCounter`] seam of its parent module).

use crate::types::{Chunk, ChunkRole, Lines, ParsedDocument, Span};

use super::TokenCounter;

/// Collects one document's chunks in ordinal order.
pub struct ChunkBuilder<'a> {
    doc: &'a ParsedDocument,
    counter: &'a dyn TokenCounter,
    /// Byte offset of the start of each line; `line_starts[0] == 0`.
    line_starts: Vec<usize>,
    chunks: Vec<Chunk>,
}

impl<'a> ChunkBuilder<'a> {
    /// A builder over `doc`, counting with `counter`.
    pub fn new(doc: &'a ParsedDocument, counter: &'a dyn TokenCounter) -> Self {
        let mut line_starts = vec![0];
        line_starts.extend(doc.text.bytes().enumerate().filter(|(_, b)| *b == b'\n').map(|(i, _)| i + 1));
        ChunkBuilder { doc, counter, line_starts, chunks: Vec::new() }
    }

    /// The document being chunked.
    pub fn doc(&self) -> &'a ParsedDocument {
        self.doc
    }

    /// The token counter.
    pub fn counter(&self) -> &'a dyn TokenCounter {
        self.counter
    }

    /// The text of `span`.
    pub fn text(&self, span: Span) -> &'a str {
        &self.doc.text[span.range()]
    }

    /// Exact token count of the text of `span`.
    pub fn count(&self, span: Span) -> usize {
        self.counter.count(self.text(span))
    }

    /// The (1-based) line holding byte `pos`.
    fn line_of(&self, pos: usize) -> u32 {
        let line = self.line_starts.partition_point(|&s| s <= pos);
        u32::try_from(line.max(1)).unwrap_or(u32::MAX)
    }

    /// Lines covered by `span`: the line of its first byte to the line of its last byte.
    pub fn lines(&self, span: Span) -> Lines {
        let last = if span.is_empty() { span.start } else { span.end - 1 };
        Lines { first: self.line_of(span.start), last: self.line_of(last) }
    }

    /// Page of the first block that overlaps `span` (an empty span: the block holding its start).
    pub fn page(&self, span: Span) -> Option<u32> {
        let blocks = &self.doc.blocks;
        let i = blocks.partition_point(|b| b.span.end <= span.start);
        let block = blocks.get(i)?;
        (block.span.start < span.end.max(span.start + 1)).then_some(block.page).flatten()
    }

    /// The ordinal the next pushed chunk gets.
    pub fn next_ordinal(&self) -> u32 {
        u32::try_from(self.chunks.len()).expect("a document has fewer than 2^32 chunks")
    }

    /// Appends a chunk whose exact token count is already known; returns its ordinal.
    pub fn push(
        &mut self,
        role: ChunkRole,
        parent: Option<u32>,
        section_path: Vec<String>,
        span: Span,
        tokens: usize,
    ) -> u32 {
        let ordinal = self.next_ordinal();
        let chunk = Chunk {
            ordinal,
            role,
            parent,
            section_path,
            span,
            page: self.page(span),
            lines: self.lines(span),
            tokens,
        };
        self.chunks.push(chunk);
        ordinal
    }

    /// Appends a chunk, counting its tokens; returns its ordinal.
    pub fn push_counted(
        &mut self,
        role: ChunkRole,
        parent: Option<u32>,
        section_path: Vec<String>,
        span: Span,
    ) -> u32 {
        let tokens = self.count(span);
        self.push(role, parent, section_path, span, tokens)
    }

    /// The chunks pushed so far, in ordinal order.
    pub fn finish(self) -> Vec<Chunk> {
        self.chunks
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::WordCounter;
    use crate::types::{Block, BlockKind};

    #[test]
    fn lines_pages_and_ordinals() {
        let text = "one\ntwo\n\nthree four\n".to_string();
        let block = |s, e, page, first, last| Block {
            kind: BlockKind::Paragraph,
            span: Span::new(s, e),
            page: Some(page),
            lines: Lines { first, last },
        };
        let doc = ParsedDocument {
            parser: "text".into(),
            title: "t".into(),
            blocks: vec![block(0, 7, 1, 1, 2), block(9, 19, 2, 4, 4)],
            text,
            metadata: Default::default(),
        };
        let mut b = ChunkBuilder::new(&doc, &WordCounter);
        assert_eq!(b.lines(Span::new(0, 7)), Lines { first: 1, last: 2 });
        assert_eq!(b.lines(Span::new(4, 19)), Lines { first: 2, last: 4 });
        assert_eq!(
            b.lines(Span::new(0, 4)),
            Lines { first: 1, last: 1 },
            "a trailing newline stays on its line"
        );
        assert_eq!(b.page(Span::new(8, 19)), Some(2), "first overlapping block");
        assert_eq!(b.page(Span::new(7, 9)), None, "a gap overlaps no block");
        assert_eq!(b.push_counted(ChunkRole::Parent, None, vec![], Span::new(0, 19)), 0);
        assert_eq!(b.push_counted(ChunkRole::Child, Some(0), vec![], Span::new(9, 19)), 1);
        let chunks = b.finish();
        assert_eq!(chunks[0].tokens, 4);
        assert_eq!(chunks[1].page, Some(2));
        assert_eq!(chunks[1].lines, Lines { first: 4, last: 4 });
    }
}
