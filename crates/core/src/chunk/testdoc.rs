//! Test-only documents: a markdown-ish reader good enough to make blocks by hand, and a code
//! document builder. Not a parser: it knows blank lines, `#` headings, ``` fences, `|` tables,
//! `- `/`* `/`1. ` lists, `> ` quotes and `! ` definitions; a form feed starts a new page.

use crate::types::{Block, BlockKind, Lines, ParsedDocument, Span};

fn kind_of(line: &str) -> BlockKind {
    let t = line.trim_start();
    if t.starts_with('|') {
        BlockKind::Table
    } else if t.starts_with("- ") || t.starts_with("* ") || is_numbered(t) {
        BlockKind::List
    } else if t.starts_with("> ") {
        BlockKind::Quote
    } else if t.starts_with("! ") {
        BlockKind::Definition
    } else {
        BlockKind::Paragraph
    }
}

fn is_numbered(t: &str) -> bool {
    let digits = t.chars().take_while(char::is_ascii_digit).count();
    digits > 0 && t[digits..].starts_with(". ")
}

/// Blocks of a markdown-ish `text`, as a parser would leave them.
pub(crate) fn md(text: &str) -> ParsedDocument {
    let paged = text.contains('\x0c');
    let mut blocks = Vec::new();
    // (kind, start, end, first line, last line)
    let mut open: Option<(BlockKind, usize, usize, u32, u32)> = None;
    let mut fence: Option<(String, usize, u32)> = None;
    let mut pos = 0;
    let push = |blocks: &mut Vec<Block>, kind, start: usize, end: usize, first, last| {
        let page = paged.then(|| 1 + text[..start].matches('\x0c').count() as u32);
        blocks.push(Block { kind, span: Span::new(start, end), page, lines: Lines { first, last } });
    };
    for (i, raw) in text.split_inclusive('\n').enumerate() {
        let n = i as u32 + 1;
        let line = raw.trim_end_matches('\n');
        let (start, end) = (pos, pos + line.len());
        pos += raw.len();
        if let Some((lang, fstart, ffirst)) = &fence {
            if line.trim_start().starts_with("```") {
                let language = (!lang.is_empty()).then(|| lang.clone());
                push(&mut blocks, BlockKind::Code { language, symbol: None }, *fstart, end, *ffirst, n);
                fence = None;
            }
            continue;
        }
        let t = line.trim();
        if t.is_empty() || t.starts_with("```") || t.starts_with('#') {
            if let Some((kind, s, e, f, l)) = open.take() {
                push(&mut blocks, kind, s, e, f, l);
            }
        }
        if t.is_empty() {
            continue;
        }
        if let Some(lang) = t.strip_prefix("```") {
            fence = Some((lang.trim().to_string(), start + (line.len() - line.trim_start().len()), n));
            continue;
        }
        if t.starts_with('#') {
            let level = t.chars().take_while(|&c| c == '#').count().min(6) as u8;
            let title = t.trim_start_matches('#').trim().to_string();
            let s = start + (line.len() - line.trim_start().len());
            push(&mut blocks, BlockKind::Heading { level, title }, s, s + t.len(), n, n);
            continue;
        }
        let s = start + (line.len() - line.trim_start().len());
        let e = start + line.trim_end().len();
        match &mut open {
            Some((_, _, oe, _, ol)) => {
                *oe = e;
                *ol = n;
            }
            None => open = Some((kind_of(t), s, e, n, n)),
        }
    }
    if let Some((kind, s, e, f, l)) = open.take() {
        push(&mut blocks, kind, s, e, f, l);
    }
    if let Some((lang, fstart, ffirst)) = fence {
        // An unclosed fence runs to the end.
        let language = (!lang.is_empty()).then_some(lang);
        let end = text.trim_end().len().max(fstart);
        let last = text[..end].matches('\n').count() as u32 + 1;
        push(&mut blocks, BlockKind::Code { language, symbol: None }, fstart, end, ffirst, last);
    }
    ParsedDocument {
        parser: "markdown".into(),
        title: "doc".into(),
        text: text.to_string(),
        blocks,
        metadata: Default::default(),
    }
}

/// A code document: `parts` joined by blank lines, one `Code` block per part (`symbol` as given).
pub(crate) fn code_doc(title: &str, parts: &[(Option<&str>, &str)]) -> ParsedDocument {
    let mut text = String::new();
    let mut blocks = Vec::new();
    let mut line = 1;
    for (symbol, body) in parts {
        if !text.is_empty() {
            text.push_str("\n\n");
            line += 2;
        }
        let start = text.len();
        let first = line;
        text.push_str(body);
        let last = first + body.matches('\n').count() as u32;
        line = last;
        blocks.push(Block {
            kind: BlockKind::Code { language: Some("rust".into()), symbol: symbol.map(str::to_string) },
            span: Span::new(start, text.len()),
            page: None,
            lines: Lines { first, last },
        });
    }
    ParsedDocument { parser: "code".into(), title: title.into(), text, blocks, metadata: Default::default() }
}

#[test]
fn md_makes_the_expected_blocks() {
    let doc = md("# Title\n\nPara one\ncontinues.\n\n| a | b |\n|---|---|\n\n```rust\nfn x() {}\n\nfn y() {}\n```\n- item\n- item\n");
    let kinds: Vec<_> = doc.blocks.iter().map(|b| &b.kind).collect();
    assert_eq!(kinds.len(), 5, "{kinds:?}");
    assert!(matches!(kinds[0], BlockKind::Heading { level: 1, title } if title == "Title"));
    assert_eq!(&doc.text[doc.blocks[1].span.range()], "Para one\ncontinues.");
    assert_eq!(doc.blocks[1].lines, Lines { first: 3, last: 4 });
    assert_eq!(*kinds[2], BlockKind::Table);
    assert_eq!(&doc.text[doc.blocks[3].span.range()], "```rust\nfn x() {}\n\nfn y() {}\n```");
    assert_eq!(*kinds[4], BlockKind::List);
}
