//! The structural chunker (`structural`, the default): structure first, size second.
//!
//! Imports `types` only (and its sibling modules).
//!
//! - **Sections** come from the heading hierarchy. A *segment* is a heading and the blocks up to
//!   the next heading of any level (text before the first heading is a segment with an empty
//!   path); a *section* is a heading and everything up to the next heading of the same or a higher
//!   level. A chunk's `section_path` is the breadcrumb of heading titles, outermost first,
//!   including the heading of its own segment.
//! - **Children** pack the blocks of one segment in order up to `child_tokens`; they never cross
//!   a segment. The heading is the start of its segment's first child. Atomic blocks (list, table,
//!   code, definition) stay whole unless one alone exceeds `max_child_tokens`; then it splits on
//!   lines (code: at blank lines first). A paragraph or quote over `child_tokens` splits into
//!   sentences ([`super::sentence`]), never inside one; a sentence over `max_child_tokens` splits on
//!   lines, then, as a last resort, on whitespace into word runs that fit. Only a single run with
//!   no whitespace can exceed `max_child_tokens`. A last child under an eighth of `child_tokens`
//!   merges into the one before when both fit in `max_child_tokens`.
//! - **Parents** are whole sections up to `parent_tokens`; a bigger section gets a parent for its
//!   own segment (heading and content up to its first subsection) and its subsections are handled
//!   the same way; a segment bigger still gets parents for consecutive runs of its children.
//! - **Overlap**: with `overlap_tokens > 0`, a child starts about that many tokens (whole
//!   sentences) back into the previous child of its segment, while it stays within
//!   `max_child_tokens`.
//!
//! Ordinals run in document order, each parent just before its children.

use std::ops::Range;

use crate::types::{BlockKind, Chunk, ChunkRole, ParsedDocument, Span};

use super::builder::ChunkBuilder;
use super::split::{self, finalize, pack, Packed, Piece};
use super::{ChunkOptions, Chunker, TokenCounter};

/// Sections, atomic blocks, sentences. See the module docs.
#[derive(Debug, Clone, Copy, Default)]
pub struct StructuralChunker {
    options: ChunkOptions,
}

impl StructuralChunker {
    /// A structural chunker with these sizes (made consistent by [`ChunkOptions::normalised`]).
    pub fn new(options: ChunkOptions) -> Self {
        StructuralChunker { options: options.normalised() }
    }
}

impl Chunker for StructuralChunker {
    fn name(&self) -> &'static str {
        "structural"
    }

    #[tracing::instrument(skip_all, fields(chunker = "structural", title = %doc.title))]
    fn chunk(&self, doc: &ParsedDocument, tokens: &dyn TokenCounter) -> Vec<Chunk> {
        let o = self.options;
        let mut b = ChunkBuilder::new(doc, tokens);
        let segments = segments(doc);
        let children: Vec<Vec<Packed>> = segments
            .iter()
            .map(|seg| {
                let pieces = pieces(&b, seg.blocks.clone(), o.max_child_tokens, Some(o.child_tokens));
                let groups = pack(&pieces, o.child_tokens, o.max_child_tokens);
                let mut packed = finalize(&b, &pieces, groups, o.max_child_tokens);
                split::overlap(&b, &mut packed, o.overlap_tokens, o.max_child_tokens);
                packed
            })
            .collect();
        emit(&mut b, &segments, &children, o.parent_tokens);
        b.finish()
    }
}

/// A heading and the blocks up to the next heading of any level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Segment {
    /// The heading's level; 0 for text before the first heading.
    pub level: u8,
    /// Breadcrumb of heading titles, outermost first, this segment's own heading last.
    pub path: Vec<String>,
    /// Its blocks (indices into `doc.blocks`), the heading first.
    pub blocks: Range<usize>,
}

/// The document's segments, in order; every block belongs to exactly one.
pub(crate) fn segments(doc: &ParsedDocument) -> Vec<Segment> {
    let mut out: Vec<Segment> = Vec::new();
    let mut stack: Vec<(u8, String)> = Vec::new();
    for (i, block) in doc.blocks.iter().enumerate() {
        if let BlockKind::Heading { level, title } = &block.kind {
            let level = (*level).max(1);
            while stack.last().is_some_and(|(l, _)| *l >= level) {
                stack.pop();
            }
            stack.push((level, title.clone()));
            out.push(Segment {
                level,
                path: stack.iter().map(|(_, t)| t.clone()).collect(),
                blocks: i..i + 1,
            });
        } else {
            match out.last_mut() {
                Some(seg) => seg.blocks.end = i + 1,
                None => out.push(Segment { level: 0, path: Vec::new(), blocks: i..i + 1 }),
            }
        }
    }
    out
}

/// The breadcrumb at each block (the path of its segment).
pub(crate) fn block_paths(doc: &ParsedDocument) -> Vec<std::rc::Rc<Vec<String>>> {
    let mut out = Vec::with_capacity(doc.blocks.len());
    for seg in segments(doc) {
        let path = std::rc::Rc::new(seg.path);
        out.extend(seg.blocks.map(|_| path.clone()));
    }
    out
}

/// The levels a block of `kind` splits at when it must.
pub(crate) fn levels_for(kind: &BlockKind) -> &'static [split::Level] {
    match kind {
        BlockKind::Code { .. } => split::CODE,
        k if k.is_atomic() => split::LINES,
        _ => split::PROSE,
    }
}

/// Pieces of `blocks`: a block whole where it may stay whole (a heading or an atomic block up to
/// `max`, anything up to `target`; `None`: prose is always split, as the semantic chunker wants
/// its sentences), else split at its levels. A heading glues to what follows it.
pub(crate) fn pieces(b: &ChunkBuilder<'_>, blocks: Range<usize>, max: usize, target: Option<usize>) -> Vec<Piece> {
    let doc = b.doc();
    let mut out = Vec::new();
    for block in &doc.blocks[blocks] {
        let span = split::trim(&doc.text, block.span);
        if span.is_empty() {
            continue;
        }
        let tokens = b.count(span);
        let heading = matches!(block.kind, BlockKind::Heading { .. });
        let whole = target.is_some_and(|t| tokens <= t) || (tokens <= max && (block.kind.is_atomic() || heading));
        if whole {
            out.push(Piece { glue_next: heading, ..Piece::new(span, tokens) });
        } else {
            split::split(b, span, max, levels_for(&block.kind), &mut out);
        }
    }
    out
}

/// Pushes parents and children for all segments: each top-level section (and the text before the
/// first heading) in order.
pub(crate) fn emit(
    b: &mut ChunkBuilder<'_>,
    segs: &[Segment],
    children: &[Vec<Packed>],
    parent_tokens: usize,
) {
    let mut k = 0;
    while k < segs.len() {
        let e = section_end(segs, k, segs.len());
        emit_section(b, segs, children, k..e, parent_tokens);
        k = e;
    }
}

/// End (exclusive) of the section that starts at segment `k`, within `..limit`.
fn section_end(segs: &[Segment], k: usize, limit: usize) -> usize {
    if segs[k].level == 0 {
        return k + 1;
    }
    let mut e = k + 1;
    while e < limit && segs[e].level > segs[k].level {
        e += 1;
    }
    e
}

fn emit_section(
    b: &mut ChunkBuilder<'_>,
    segs: &[Segment],
    children: &[Vec<Packed>],
    range: Range<usize>,
    parent_tokens: usize,
) {
    let tokens = |k: usize| children[k].iter().map(|c| c.tokens).sum::<usize>();
    let total: usize = range.clone().map(tokens).sum();
    let head = range.start;
    if total <= parent_tokens {
        let kids: Vec<(usize, &Packed)> =
            range.flat_map(|k| children[k].iter().map(move |c| (k, c))).collect();
        emit_parent(b, segs, &segs[head].path, &kids);
        return;
    }
    let own: Vec<(usize, &Packed)> = children[head].iter().map(|c| (head, c)).collect();
    if tokens(head) <= parent_tokens {
        emit_parent(b, segs, &segs[head].path, &own);
    } else {
        let mut start = 0;
        let mut sum = 0;
        for (i, (_, c)) in own.iter().enumerate() {
            if i > start && sum + c.tokens > parent_tokens {
                emit_parent(b, segs, &segs[head].path, &own[start..i]);
                start = i;
                sum = 0;
            }
            sum += c.tokens;
        }
        emit_parent(b, segs, &segs[head].path, &own[start..]);
    }
    let mut k = head + 1;
    while k < range.end {
        let e = section_end(segs, k, range.end);
        emit_section(b, segs, children, k..e, parent_tokens);
        k = e;
    }
}

/// One parent covering `kids`, then the kids (each with its segment's path).
fn emit_parent(b: &mut ChunkBuilder<'_>, segs: &[Segment], path: &[String], kids: &[(usize, &Packed)]) {
    let (Some(first), Some(last)) = (kids.first(), kids.last()) else {
        return;
    };
    let start = kids.iter().map(|(_, c)| c.span.start).min().unwrap_or(first.1.span.start);
    let span = Span::new(start, last.1.span.end);
    let parent = b.push_counted(ChunkRole::Parent, None, path.to_vec(), span);
    for (k, c) in kids {
        b.push(ChunkRole::Child, Some(parent), segs[*k].path.clone(), c.span, c.tokens);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::testdoc::md;
    use crate::chunk::WordCounter;

    fn run(text: &str, o: ChunkOptions) -> (ParsedDocument, Vec<Chunk>) {
        let doc = md(text);
        let chunks = StructuralChunker::new(o).chunk(&doc, &WordCounter);
        (doc, chunks)
    }

    fn opts(child: usize, max: usize, parent: usize) -> ChunkOptions {
        ChunkOptions { child_tokens: child, max_child_tokens: max, parent_tokens: parent, overlap_tokens: 0 }
    }

    fn children(chunks: &[Chunk]) -> Vec<&Chunk> {
        chunks.iter().filter(|c| c.role == ChunkRole::Child).collect()
    }

    const POLICY: &str = "# Travel Policy\n\nThis policy covers travel.\n\n## 1 Scope\n\nAll staff, e.g. contractors, are covered.\n\n## 2 Expenses\n\n### 2.1 Rates\n\n| Item | Rate |\n|------|------|\n| Hotel | 150.00 |\n| Meals | 45.50 |\n| Taxi | 30.00 |\n\n### 2.2 Insurance\n\nDr. Smith approves claims. Claims over 1,000.00 need a receipt.\n\n## 3 Approval\n\n- Manager signs.\n- Finance pays.\n";

    #[test]
    fn policy_document_gets_section_paths_and_keeps_the_table_whole() {
        let (doc, chunks) = run(POLICY, opts(40, 60, 80));
        let kids = children(&chunks);
        let paths: Vec<Vec<&str>> =
            kids.iter().map(|c| c.section_path.iter().map(String::as_str).collect()).collect();
        assert_eq!(
            paths,
            vec![
                vec!["Travel Policy"],
                vec!["Travel Policy", "1 Scope"],
                vec!["Travel Policy", "2 Expenses"],
                vec!["Travel Policy", "2 Expenses", "2.1 Rates"],
                vec!["Travel Policy", "2 Expenses", "2.2 Insurance"],
                vec!["Travel Policy", "3 Approval"],
            ]
        );
        let table = doc.blocks.iter().find(|b| b.kind == BlockKind::Table).unwrap();
        assert!(kids.iter().any(|c| c.span.start <= table.span.start && c.span.end >= table.span.end));
        let rates = kids[3];
        assert!(
            doc.text[rates.span.range()].starts_with("### 2.1 Rates\n\n| Item"),
            "the heading starts its child"
        );
        assert_eq!(
            &doc.text[kids[4].span.range()],
            "### 2.2 Insurance\n\nDr. Smith approves claims. Claims over 1,000.00 need a receipt."
        );
        // Whole document is too big for one parent: the top section's own text, then subsections.
        let parents: Vec<&Chunk> = chunks.iter().filter(|c| c.role == ChunkRole::Parent).collect();
        assert!(parents.len() > 1);
        for kid in &kids {
            let p = &chunks[kid.parent.unwrap() as usize];
            assert_eq!(p.role, ChunkRole::Parent);
            assert!(p.span.start <= kid.span.start && kid.span.end <= p.span.end);
        }
        let expenses =
            parents.iter().find(|p| p.section_path.last().map(String::as_str) == Some("2 Expenses"));
        let expenses = expenses.expect("a parent for section 2");
        assert!(
            doc.text[expenses.span.range()].contains("Claims over"),
            "section 2 fits whole: {expenses:?}"
        );
    }

    #[test]
    fn one_small_document_is_one_parent() {
        let (_, chunks) = run(POLICY, ChunkOptions::default());
        assert_eq!(chunks.iter().filter(|c| c.role == ChunkRole::Parent).count(), 1);
        assert_eq!(chunks[0].role, ChunkRole::Parent);
        assert_eq!(chunks[0].section_path, vec!["Travel Policy".to_string()]);
        assert!(chunks[1..].iter().all(|c| c.parent == Some(0)));
        assert_eq!(chunks.len(), 1 + 6, "one child per segment: {chunks:#?}");
    }

    #[test]
    fn long_paragraph_splits_only_at_sentence_ends() {
        let sentences: Vec<String> = (0..40)
            .map(|i| format!("Sentence {i} mentions Dr. Who, e.g. at 3.14 pm, and ends here."))
            .collect();
        let text = sentences.join(" ");
        let (doc, chunks) = run(&text, opts(40, 60, 400));
        let kids = children(&chunks);
        assert!(kids.len() > 5);
        for c in &kids {
            let t = &doc.text[c.span.range()];
            assert!(t.starts_with("Sentence "), "{t}");
            assert!(t.ends_with("ends here."), "{t}");
            assert!(c.tokens <= 60);
        }
    }

    #[test]
    fn oversized_table_splits_on_lines_and_a_small_one_stays_whole() {
        let rows: Vec<String> = (0..30).map(|i| format!("| row {i} | value {i} |")).collect();
        let text = format!("# T\n\n{}\n\nAfter.", rows.join("\n"));
        let (doc, chunks) = run(&text, opts(20, 40, 400));
        for c in children(&chunks) {
            let t = &doc.text[c.span.range()];
            assert!(c.tokens <= 40);
            assert!(
                t.lines().all(|l| l.starts_with('|') || l.is_empty() || l == "# T" || l == "After."),
                "{t}"
            );
        }
        let (_, chunks) = run(&text, opts(20, 400, 1000));
        let table_kids = children(&chunks).into_iter().filter(|c| c.tokens > 40).count();
        assert_eq!(table_kids, 1, "under the hard budget the table stays in one child");
    }

    #[test]
    fn tiny_tail_merges_into_the_previous_child() {
        let text = "# H\n\nOne two three four five six seven eight. Nine ten eleven twelve thirteen fourteen.\n\nEnd.";
        let (doc, chunks) = run(text, opts(20, 40, 400));
        let kids = children(&chunks);
        assert!(doc.text[kids.last().unwrap().span.range()].ends_with("fourteen.\n\nEnd."), "{kids:?}");
    }

    #[test]
    fn overlap_reaches_back_whole_sentences() {
        let text = (0..12).map(|i| format!("Fact number {i} is here.")).collect::<Vec<_>>().join(" ");
        let mut o = opts(18, 40, 400);
        o.overlap_tokens = 6;
        let (doc, chunks) = run(&text, o);
        let kids = children(&chunks);
        assert!(kids.len() >= 3);
        for pair in kids.windows(2) {
            assert!(pair[1].span.start < pair[0].span.end, "children overlap");
            assert!(doc.text[pair[1].span.range()].starts_with("Fact number"));
        }
    }

    #[test]
    fn text_before_the_first_heading_has_an_empty_path() {
        let (_, chunks) = run("Preface text.\n\n# A\n\nBody.", ChunkOptions::default());
        let kids = children(&chunks);
        assert!(kids[0].section_path.is_empty());
        assert_eq!(kids[1].section_path, vec!["A".to_string()]);
    }

    #[test]
    fn empty_document_has_no_chunks() {
        assert!(run("", ChunkOptions::default()).1.is_empty());
        assert!(run("\n\n  \n", ChunkOptions::default()).1.is_empty());
    }
}
