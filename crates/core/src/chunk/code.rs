//! The code chunker (`code`): a code file's blocks are syntax units (`Code { symbol }` for a
//! function, class..., symbol-less blocks for the imports, comments and other glue between them).
//!
//! Imports `types` only (and its sibling modules).
//!
//! - Each unit is atomic. Consecutive units, glue included, pack together up to `child_tokens`.
//! - A unit over `max_child_tokens` splits on its own: at blank lines first, then lines, then (last
//!   resort) whitespace; its pieces pack up to `child_tokens` and share a chunk with no other unit.
//! - `section_path` is `[title, symbol]` for a chunk that holds exactly one named unit (or a piece
//!   of one), else `[title]`.
//! - Parents are runs of consecutive children up to `parent_tokens`; a parent's path is
//!   `[title, symbol]` when all its children belong to that one unit, else `[title]`.
//! - `overlap_tokens` does not apply: syntax units need none.
//!
//! [`default_chunker_for`] picks this chunker for code documents.

use crate::types::{BlockKind, Chunk, ChunkRole, ParsedDocument, Span};

use super::builder::ChunkBuilder;
use super::split::{self, finalize, pack, Packed, Piece};
use super::{ChunkOptions, Chunker, ChunkerKind, TokenCounter};

/// Syntax units of code files. See the module docs.
#[derive(Debug, Clone, Copy, Default)]
pub struct CodeChunker {
    options: ChunkOptions,
}

impl CodeChunker {
    /// A code chunker with these sizes (made consistent by [`ChunkOptions::normalised`]).
    pub fn new(options: ChunkOptions) -> Self {
        CodeChunker { options: options.normalised() }
    }
}

/// The chunker a document gets when `requested` was asked for: code documents (parser `code`) get
/// [`ChunkerKind::Code`] unless [`ChunkerKind::Fixed`] was asked for; every other document gets
/// what was asked for.
pub fn default_chunker_for(doc: &ParsedDocument, requested: ChunkerKind) -> ChunkerKind {
    if doc.parser == "code" && requested != ChunkerKind::Fixed {
        ChunkerKind::Code
    } else {
        requested
    }
}

impl Chunker for CodeChunker {
    fn name(&self) -> &'static str {
        "code"
    }

    #[tracing::instrument(skip_all, fields(chunker = "code", title = %doc.title))]
    fn chunk(&self, doc: &ParsedDocument, tokens: &dyn TokenCounter) -> Vec<Chunk> {
        let o = self.options;
        let mut b = ChunkBuilder::new(doc, tokens);
        // Pieces, and for each the named unit (block index) it comes from.
        let mut pieces: Vec<Piece> = Vec::new();
        let mut units: Vec<Option<usize>> = Vec::new();
        let mut after_split = false;
        for (bi, block) in doc.blocks.iter().enumerate() {
            let span = split::trim(&doc.text, block.span);
            if span.is_empty() {
                continue;
            }
            let named = symbol(&block.kind).map(|_| bi);
            let count = b.count(span);
            let first = pieces.len();
            if count <= o.max_child_tokens {
                pieces.push(Piece { break_before: after_split, ..Piece::new(span, count) });
                after_split = false;
            } else {
                split::split(&b, span, o.max_child_tokens, split::CODE, &mut pieces);
                if let Some(p) = pieces.get_mut(first) {
                    p.break_before = true;
                }
                after_split = true;
            }
            units.resize(pieces.len(), named);
        }
        let groups = pack(&pieces, o.child_tokens, o.max_child_tokens);
        let children = finalize(&b, &pieces, groups, o.max_child_tokens);
        // The one named unit among pieces `r`, if exactly one.
        let only_unit = |r: std::ops::Range<usize>| -> Option<usize> {
            let mut named = units[r].iter().flatten();
            let first = *named.next()?;
            named.all(|u| *u == first).then_some(first)
        };
        let path = |unit: Option<usize>| {
            let mut path = vec![doc.title.clone()];
            path.extend(unit.and_then(|u| symbol(&doc.blocks[u].kind)).map(str::to_string));
            path
        };
        let mut start = 0;
        while start < children.len() {
            let mut end = start + 1;
            let mut sum = children[start].tokens;
            while end < children.len() && sum + children[end].tokens <= o.parent_tokens {
                sum += children[end].tokens;
                end += 1;
            }
            let kids: &[Packed] = &children[start..end];
            let (first, last) = (&kids[0], &kids[kids.len() - 1]);
            let span = Span::new(first.span.start, last.span.end);
            let parent = b.push_counted(
                ChunkRole::Parent,
                None,
                path(only_unit(first.pieces.start..last.pieces.end)),
                span,
            );
            for kid in kids {
                b.push(
                    ChunkRole::Child,
                    Some(parent),
                    path(only_unit(kid.pieces.clone())),
                    kid.span,
                    kid.tokens,
                );
            }
            start = end;
        }
        b.finish()
    }
}

/// The symbol of a named unit.
fn symbol(kind: &BlockKind) -> Option<&str> {
    match kind {
        BlockKind::Code { symbol: Some(s), .. } => Some(s.as_str()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::testdoc::{code_doc, md};
    use crate::chunk::WordCounter;

    fn opts(child: usize, max: usize, parent: usize) -> ChunkOptions {
        ChunkOptions { child_tokens: child, max_child_tokens: max, parent_tokens: parent, overlap_tokens: 0 }
    }

    fn func(name: &str, lines: usize) -> String {
        let body: Vec<String> = (0..lines).map(|i| format!("    let x{i} = {i};")).collect();
        format!("fn {name}() {{\n{}\n}}", body.join("\n"))
    }

    #[test]
    fn small_units_pack_and_named_units_get_their_symbol() {
        let (a, b2, big) = (func("a", 1), func("b", 1), func("big", 6));
        let doc = code_doc(
            "lib.rs",
            &[(None, "use std::io;"), (Some("a"), &a), (Some("b"), &b2), (Some("big"), &big)],
        );
        let chunks = CodeChunker::new(opts(30, 60, 1000)).chunk(&doc, &WordCounter);
        let kids: Vec<&Chunk> = chunks.iter().filter(|c| c.role == ChunkRole::Child).collect();
        assert_eq!(kids.len(), 2, "{kids:#?}");
        assert_eq!(kids[0].section_path, vec!["lib.rs"], "two named units: title only");
        assert!(doc.text[kids[0].span.range()].starts_with("use std::io;"));
        assert_eq!(kids[1].section_path, vec!["lib.rs", "big"]);
        assert_eq!(&doc.text[kids[1].span.range()], big);
        assert_eq!(chunks[0].role, ChunkRole::Parent);
        assert_eq!(chunks[0].section_path, vec!["lib.rs"]);
    }

    #[test]
    fn a_big_unit_splits_at_blank_lines_and_keeps_its_symbol() {
        let part =
            |p: usize| (0..4).map(|i| format!("    let v{p}_{i} = {i};")).collect::<Vec<_>>().join("\n");
        let big = format!("fn big() {{\n{}\n\n{}\n\n{}\n}}", part(0), part(1), part(2));
        let doc =
            code_doc("m.rs", &[(Some("small"), "fn small() {}"), (Some("big"), &big), (None, "// end")]);
        let chunks = CodeChunker::new(opts(20, 40, 60)).chunk(&doc, &WordCounter);
        let kids: Vec<&Chunk> = chunks.iter().filter(|c| c.role == ChunkRole::Child).collect();
        let big_kids: Vec<&&Chunk> = kids.iter().filter(|c| c.section_path == ["m.rs", "big"]).collect();
        assert!(big_kids.len() >= 3, "{kids:#?}");
        for k in &big_kids {
            let t = &doc.text[k.span.range()];
            assert!(!t.contains("fn small") && !t.contains("// end"), "a split unit shares no chunk: {t}");
            assert!(k.tokens <= 40);
        }
        assert!(
            doc.text[big_kids[1].span.range()].starts_with("    let v1_0")
                || doc.text[big_kids[1].span.range()].starts_with("let v1_0")
        );
        let parents: Vec<&Chunk> = chunks.iter().filter(|c| c.role == ChunkRole::Parent).collect();
        assert!(parents.len() >= 2);
    }

    #[test]
    fn code_documents_default_to_the_code_chunker() {
        let code = code_doc("x.rs", &[(Some("f"), "fn f() {}")]);
        let text = md("hello");
        assert_eq!(default_chunker_for(&code, ChunkerKind::Structural), ChunkerKind::Code);
        assert_eq!(default_chunker_for(&code, ChunkerKind::Semantic), ChunkerKind::Code);
        assert_eq!(default_chunker_for(&code, ChunkerKind::Fixed), ChunkerKind::Fixed);
        assert_eq!(default_chunker_for(&text, ChunkerKind::Structural), ChunkerKind::Structural);
    }
}
