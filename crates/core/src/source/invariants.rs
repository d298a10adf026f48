//! The invariants every parser keeps, checked on a parsed document: the one statement of them,
//! which the parsers' unit tests and the fuzzer (`ragbox-fuzz`) both call.
//!
//! Normalised text (no CR, no NUL, no leading BOM) and a one-line title; blocks in order, not
//! overlapping, non-empty, inside the text on character boundaries, not blank, not ending with
//! whitespace or starting with a line end (code may start with indentation); each block's lines
//! agreeing with its span; heading levels 1-6 with a title.

use super::LineIndex;
use crate::types::{BlockKind, ParsedDocument};

/// `Ok` when `doc` keeps the parser invariants; otherwise what it breaks first.
pub fn check_document(doc: &ParsedDocument) -> Result<(), String> {
    if doc.text.contains('\r') || doc.text.contains('\0') || doc.text.starts_with('\u{feff}') {
        return Err("text is not normalised (CR, NUL or BOM)".into());
    }
    if doc.title.contains('\n') {
        return Err(format!("title spans lines: {:?}", doc.title));
    }
    let index = LineIndex::new(&doc.text);
    let mut prev_end = 0;
    for (i, b) in doc.blocks.iter().enumerate() {
        let Some(s) = doc.text.get(b.span.range()) else {
            return Err(format!("block {i} {:?} is outside the text ({} bytes) or inside a character", b.span, doc.text.len()));
        };
        if b.span.start < prev_end {
            return Err(format!("block {i} overlaps the one before or is out of order: {b:?}"));
        }
        if s.trim().is_empty() {
            return Err(format!("block {i} is blank or empty: {b:?}"));
        }
        if s.ends_with(char::is_whitespace) || s.starts_with('\n') {
            return Err(format!("block {i} is not trimmed: {:?}", s.chars().take(40).collect::<String>()));
        }
        if b.lines != index.lines(b.span) || b.lines.first < 1 || b.lines.first > b.lines.last {
            return Err(format!("block {i} lines {:?} disagree with its span", b.lines));
        }
        if let BlockKind::Heading { level, title } = &b.kind {
            if !(1..=6).contains(level) || title.is_empty() {
                return Err(format!("block {i}: heading level {level}, title {title:?}"));
            }
        }
        prev_end = b.span.end;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Block, Lines, Span};

    fn doc(text: &str, blocks: Vec<Block>) -> ParsedDocument {
        ParsedDocument { parser: "text".into(), title: "t".into(), text: text.into(), blocks, metadata: Default::default() }
    }

    #[test]
    fn a_well_formed_document_passes_and_each_broken_rule_is_named() {
        let block = |s: usize, e: usize, first: u32, last: u32| Block { kind: BlockKind::Paragraph, span: Span::new(s, e), page: None, lines: Lines { first, last } };
        assert_eq!(check_document(&doc("ab\ncd", vec![block(0, 2, 1, 1), block(3, 5, 2, 2)])), Ok(()));
        assert!(check_document(&doc("a\r\nb", vec![])).unwrap_err().contains("normalised"));
        assert!(check_document(&doc("ab\ncd", vec![block(3, 5, 2, 2), block(0, 2, 1, 1)])).unwrap_err().contains("out of order"));
        assert!(check_document(&doc("ab ", vec![block(0, 3, 1, 1)])).unwrap_err().contains("not trimmed"));
        assert!(check_document(&doc("ab\ncd", vec![block(3, 5, 1, 1)])).unwrap_err().contains("lines"));
        assert!(check_document(&doc("ab", vec![block(0, 9, 1, 1)])).unwrap_err().contains("outside"));
    }
}
