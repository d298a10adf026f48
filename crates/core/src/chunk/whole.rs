//! One child per document, spanning all of its blocks: for collections of short records (FAQ
//! entries, abstracts) and for comparing with whole-document baselines. No budget applies; the
//! embedder truncates what exceeds its window and records that it did.

use crate::chunk::{ChunkBuilder, Chunker, TokenCounter};
use crate::types::{Chunk, ChunkRole, ParsedDocument, Span};

/// The whole-document chunker.
#[derive(Debug, Clone, Copy, Default)]
pub struct WholeChunker;

impl Chunker for WholeChunker {
    fn name(&self) -> &'static str {
        "whole"
    }

    fn chunk(&self, doc: &ParsedDocument, tokens: &dyn TokenCounter) -> Vec<Chunk> {
        let (Some(first), Some(last)) = (doc.blocks.first(), doc.blocks.last()) else { return Vec::new() };
        let mut b = ChunkBuilder::new(doc, tokens);
        b.push_counted(ChunkRole::Child, None, Vec::new(), Span::new(first.span.start, last.span.end));
        b.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::WordCounter;
    use crate::types::{Block, BlockKind, Lines};

    #[test]
    fn one_child_over_every_block() {
        let text = "# T\n\nOne. Two.\n\nThree.".to_string();
        let block = |kind, s, e, l| Block { kind, span: Span::new(s, e), page: None, lines: Lines { first: l, last: l } };
        let doc = ParsedDocument {
            parser: "markdown".into(),
            title: "T".into(),
            blocks: vec![
                block(BlockKind::Heading { level: 1, title: "T".into() }, 0, 3, 1),
                block(BlockKind::Paragraph, 5, 14, 3),
                block(BlockKind::Paragraph, 16, 22, 5),
            ],
            text,
            metadata: Default::default(),
        };
        let chunks = WholeChunker.chunk(&doc, &WordCounter);
        assert_eq!(chunks.len(), 1);
        assert_eq!(&doc.text[chunks[0].span.range()], doc.text.as_str());
        assert_eq!((chunks[0].role, chunks[0].lines.first, chunks[0].lines.last), (ChunkRole::Child, 1, 5));
        let empty = ParsedDocument { blocks: vec![], text: String::new(), ..doc };
        assert!(WholeChunker.chunk(&empty, &WordCounter).is_empty());
    }
}
