//! Invariants of every chunker on random documents (proptest), and a 1 MB document.
//!
//! For each chunker: spans lie on character boundaries; children cover every non-whitespace byte
//! of every block, in order, without overlap when no overlap is asked for; only a run with no
//! whitespace exceeds `max_child_tokens`; each child's parent is an earlier parent chunk that
//! contains it; ordinals are `0..n`; token counts are the counter's count of the chunk text.

use std::sync::Arc;

use proptest::prelude::*;

use crate::types::{BlockKind, Chunk, ChunkRole, ParsedDocument};

use super::semantic::tests::TopicEmbedder;
use super::testdoc::{code_doc, md};
use super::{
    ChunkOptions, Chunker, CodeChunker, FixedChunker, FixedOptions, SemanticChunker, SemanticOptions,
    StructuralChunker, TokenCounter, WordCounter,
};

/// What a chunker's output must satisfy.
struct Expect {
    max_child_tokens: usize,
    /// Children may overlap (overlap asked for).
    overlap: bool,
    /// Children have parents.
    parents: bool,
    /// Children never cross a heading (structural and semantic).
    sections: bool,
}

fn check(doc: &ParsedDocument, chunks: &[Chunk], e: &Expect) {
    let text = doc.text.as_str();
    let mut children: Vec<&Chunk> = Vec::new();
    let headings: Vec<usize> = doc
        .blocks
        .iter()
        .filter(|b| matches!(b.kind, BlockKind::Heading { .. }))
        .map(|b| b.span.start)
        .collect();
    for (i, c) in chunks.iter().enumerate() {
        assert_eq!(c.ordinal as usize, i, "ordinals are 0..n in order");
        let t = text.get(c.span.range()).expect("span on char boundaries");
        assert!(!t.trim().is_empty(), "no empty chunk: {c:?}");
        assert_eq!(c.tokens, WordCounter.count(t), "exact token count of {c:?}");
        match c.role {
            ChunkRole::Parent => {
                assert!(e.parents);
                assert_eq!(c.parent, None);
            }
            ChunkRole::Child => {
                if c.tokens > e.max_child_tokens {
                    assert!(
                        !t.contains(char::is_whitespace),
                        "only an unsplittable run exceeds the budget: {t:?}"
                    );
                }
                match c.parent {
                    Some(p) => {
                        assert!(e.parents);
                        let p = &chunks[p as usize];
                        assert!(p.ordinal < c.ordinal);
                        assert_eq!(p.role, ChunkRole::Parent);
                        assert!(
                            p.span.start <= c.span.start && c.span.end <= p.span.end,
                            "{p:?} holds {c:?}"
                        );
                    }
                    None => assert!(!e.parents, "every child has a parent"),
                }
                if e.sections {
                    let i = headings.partition_point(|&h| h <= c.span.start);
                    let crossed = headings.get(i).filter(|&&h| h < c.span.end);
                    assert!(crossed.is_none(), "child {c:?} crosses the heading at {crossed:?}");
                }
                children.push(c);
            }
        }
    }
    for pair in children.windows(2) {
        assert!(pair[0].span.start < pair[1].span.start, "children in order");
        assert!(pair[0].span.end < pair[1].span.end, "children in order");
        if !e.overlap {
            assert!(pair[0].span.end <= pair[1].span.start, "children do not overlap");
        }
    }
    // Coverage: every non-whitespace byte of every block lies in some child.
    let mut at = 0; // children[..at] end before the byte looked at
    for b in &doc.blocks {
        for (i, ch) in text[b.span.range()].char_indices() {
            if ch.is_whitespace() {
                continue;
            }
            let pos = b.span.start + i;
            while at < children.len() && children[at].span.end <= pos {
                at += 1;
            }
            let covered = children[at..].iter().take_while(|c| c.span.start <= pos).any(|c| pos < c.span.end);
            assert!(covered, "byte {pos} ({ch:?}) of {b:?} is in no child");
        }
    }
}

const WORDS: &[&str] = &[
    "alpha",
    "beta",
    "gamma",
    "the",
    "a",
    "of",
    "é",
    "café",
    "naïve",
    "中文",
    "日本語",
    "🦀",
    "👍🏽",
    "e.g.",
    "Dr.",
    "3.14",
    "v1.2.3",
    "cats",
    "taxes",
    "rockets",
    "soup",
    "x",
    "https://example.com/a.b?c=d",
    "(see",
    "it)",
    "and,",
];

fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        20 => prop::sample::select(WORDS).prop_map(str::to_string),
        1 => (5usize..60).prop_map(|n| vec!["q"; n].join("-")), // one long unsplittable run
    ]
}

fn words(n: std::ops::Range<usize>) -> impl Strategy<Value = String> {
    prop::collection::vec(word(), n).prop_map(|w| w.join(" "))
}

fn sentence() -> impl Strategy<Value = String> {
    (words(1..25), prop::sample::select(&[".", "!", "?", ".", ""][..]), any::<bool>()).prop_map(
        |(w, end, cap)| {
            let mut s = format!("{w}{end}");
            if cap {
                if let Some(c) = s.chars().next() {
                    s.replace_range(..c.len_utf8(), &c.to_uppercase().to_string());
                }
            }
            s
        },
    )
}

fn block() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => (1usize..5, words(1..6)).prop_map(|(l, w)| format!("{} {w}", "#".repeat(l))),
        5 => (prop::collection::vec(sentence(), 1..30), any::<bool>())
            .prop_map(|(s, wrap)| s.join(if wrap { "\n" } else { " " })),
        1 => prop::collection::vec(words(1..12), 1..15)
            .prop_map(|items| items.iter().map(|i| format!("- {i}")).collect::<Vec<_>>().join("\n")),
        1 => prop::collection::vec(words(1..5), 1..25).prop_map(|rows| {
            let mut t = vec!["| k | v |".to_string(), "|---|---|".to_string()];
            t.extend(rows.iter().map(|r| format!("| {r} | {} |", r.len())));
            t.join("\n")
        }),
        1 => prop::collection::vec(words(0..10), 1..30)
            .prop_map(|lines| format!("```rust\n{}\n```", lines.join("\n"))),
        1 => sentence().prop_map(|s| format!("> {s}")),
        1 => sentence().prop_map(|s| format!("! Term: {s}")),
    ]
}

fn document() -> impl Strategy<Value = String> {
    (prop::collection::vec(block(), 0..25), any::<bool>())
        .prop_map(|(blocks, paged)| blocks.join(if paged { "\n\n\x0c\n" } else { "\n\n" }))
}

fn options() -> impl Strategy<Value = ChunkOptions> {
    (3usize..60, 0usize..60, 0usize..300, prop_oneof![3 => Just(0usize), 1 => 1usize..20]).prop_map(
        |(child, extra, parent, overlap)| ChunkOptions {
            child_tokens: child,
            max_child_tokens: child + extra,
            parent_tokens: child + extra + parent,
            overlap_tokens: overlap,
        },
    )
}

fn code_document() -> impl Strategy<Value = ParsedDocument> {
    let unit =
        (prop::option::of(prop::sample::select(&["f", "g", "Parser", "new"][..])), 1usize..40, 0usize..8)
            .prop_map(|(name, lines, width)| {
                let body: Vec<String> = (0..lines)
                    .map(|i| {
                        if i % 7 == 6 {
                            String::new()
                        } else {
                            format!("    let v{i} = {};", "é + 1 ".repeat(width))
                        }
                    })
                    .collect();
                match name {
                    Some(n) => (Some(n), format!("fn {n}() {{\n{}\n}}", body.join("\n"))),
                    None => (None, format!("// glue {}", body.len())),
                }
            });
    prop::collection::vec(unit, 0..20).prop_map(|units| {
        let parts: Vec<(Option<&str>, &str)> = units.iter().map(|(n, b)| (*n, b.as_str())).collect();
        code_doc("lib.rs", &parts)
    })
}

fn expect(o: &ChunkOptions, parents: bool, sections: bool) -> Expect {
    let o = o.normalised();
    Expect { max_child_tokens: o.max_child_tokens, overlap: o.overlap_tokens > 0, parents, sections }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn structural_invariants(text in document(), o in options()) {
        let doc = md(&text);
        let chunks = StructuralChunker::new(o).chunk(&doc, &WordCounter);
        check(&doc, &chunks, &expect(&o, true, true));
    }

    #[test]
    fn fixed_invariants(text in document(), chars in 1usize..400, overlap in 0usize..20, max in 3usize..120) {
        let doc = md(&text);
        let o = ChunkOptions { child_tokens: 1, max_child_tokens: max, ..ChunkOptions::default() };
        let chunks = FixedChunker::new(FixedOptions { chars, overlap_words: overlap }, o).chunk(&doc, &WordCounter);
        check(&doc, &chunks, &Expect { max_child_tokens: max, overlap: overlap > 0, parents: false, sections: false });
        for pair in chunks.windows(2) {
            // Over the limit only as one sentence (or word run) of its own, with no overlap.
            if doc.text[pair[1].span.range()].chars().count() > chars {
                prop_assert!(pair[0].span.end <= pair[1].span.start);
            }
        }
    }

    #[test]
    fn code_invariants(doc in code_document(), o in options()) {
        let chunks = CodeChunker::new(o).chunk(&doc, &WordCounter);
        let e = Expect { overlap: false, ..expect(&o, true, false) };
        check(&doc, &chunks, &e);
    }

    #[test]
    fn semantic_invariants(text in document(), o in options(), p in 50.0f64..100.0, buffer in 0usize..3) {
        let doc = md(&text);
        let s = SemanticOptions { breakpoint_percentile: p, buffer_size: buffer };
        let chunks = SemanticChunker::new(o, s, Arc::new(TopicEmbedder)).try_chunk(&doc, &WordCounter).unwrap();
        check(&doc, &chunks, &expect(&o, true, true));
    }

    #[test]
    fn code_chunker_on_prose_documents_keeps_invariants(text in document(), o in options()) {
        let doc = md(&text);
        let chunks = CodeChunker::new(o).chunk(&doc, &WordCounter);
        check(&doc, &chunks, &Expect { overlap: false, ..expect(&o, true, false) });
    }
}

/// About 1 MB of markdown: sections, long paragraphs, lists, tables and code.
fn megabyte() -> String {
    let mut out = String::with_capacity(1 << 20);
    let mut i = 0usize;
    while out.len() < 1 << 20 {
        let w = |k: usize| WORDS[(i * 7 + k * 13) % WORDS.len()];
        match i % 10 {
            0 => out.push_str(&format!("# Part {i}\n\n")),
            3 | 7 => out.push_str(&format!("## Section {i} {}\n\n", w(1))),
            5 => {
                for r in 0..12 {
                    out.push_str(&format!("| {} | {} | {r} |\n", w(r), w(r + 1)));
                }
                out.push('\n');
            }
            8 => out.push_str(&format!("```\nfn f{i}() {{\n    let x = {};\n}}\n```\n\n", w(2))),
            9 => out.push_str(&format!("- {}\n- {}\n- {}\n\n", w(1), w(2), w(3))),
            _ => {
                for s in 0..(20 + i % 30) {
                    out.push_str(&format!(
                        "{} {} {} {} number {s} {}. ",
                        w(s),
                        w(s + 1),
                        w(s + 2),
                        "Dr. Who",
                        w(s + 3)
                    ));
                }
                out.push_str("\n\n");
            }
        }
        i += 1;
    }
    out
}

#[test]
fn a_one_megabyte_document_chunks_with_invariants() {
    let doc = md(&megabyte());
    let o = ChunkOptions::default();
    let chunks = StructuralChunker::new(o).chunk(&doc, &WordCounter);
    check(&doc, &chunks, &expect(&o, true, true));
    assert!(chunks.len() > 1000);

    let fixed = FixedChunker::new(FixedOptions::default(), o).chunk(&doc, &WordCounter);
    check(
        &doc,
        &fixed,
        &Expect { max_child_tokens: o.max_child_tokens, overlap: true, parents: false, sections: false },
    );

    let semantic = SemanticChunker::new(o, SemanticOptions::default(), Arc::new(TopicEmbedder));
    let chunks = semantic.try_chunk(&doc, &WordCounter).expect("fake embedder");
    check(&doc, &chunks, &expect(&o, true, true));

    let parts: Vec<String> =
        (0..8000).map(|i| format!("fn f{i}() {{\n    let x = {i} + é;\n    x * 2\n}}")).collect();
    let parts: Vec<(Option<&str>, &str)> = parts.iter().map(|p| (Some("f"), p.as_str())).collect();
    let code = code_doc("big.rs", &parts);
    let chunks = CodeChunker::new(o).chunk(&code, &WordCounter);
    check(&code, &chunks, &expect(&ChunkOptions { overlap_tokens: 0, ..o }, true, false));
}
