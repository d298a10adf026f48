//! Splitting and packing shared by the chunkers: a block's span becomes pieces (paragraphs,
//! lines, sentences, word runs) of at most a budget of tokens, and pieces pack greedily into
//! chunks.
//!
//! Imports `types` only (and its sibling modules).

use std::ops::Range;

use crate::types::Span;

use super::builder::ChunkBuilder;
use super::sentence::sentences;

/// A unit that packing never splits: its span (trimmed of whitespace) and estimated tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Piece {
    pub span: Span,
    pub tokens: usize,
    /// The piece must share a chunk with the next one where the budget allows (a heading).
    pub glue_next: bool,
    /// A chunk must start at this piece.
    pub break_before: bool,
}

impl Piece {
    pub fn new(span: Span, tokens: usize) -> Self {
        Piece { span, tokens, glue_next: false, break_before: false }
    }
}

/// A way to cut a span into smaller spans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Level {
    /// Runs of non-blank lines, cut at blank lines.
    Paragraphs,
    /// Lines.
    Lines,
    /// Sentences ([`sentences`]).
    Sentences,
    /// Runs of whitespace-separated words, packed up to the budget (the last resort).
    Words,
}

/// Prose: sentences, then lines, then words.
pub(crate) const PROSE: &[Level] = &[Level::Sentences, Level::Lines, Level::Words];
/// Tables, lists, definitions: lines, then words.
pub(crate) const LINES: &[Level] = &[Level::Lines, Level::Words];
/// Code: blank-line-separated stretches, then lines, then words.
pub(crate) const CODE: &[Level] = &[Level::Paragraphs, Level::Lines, Level::Words];

/// `span` without leading and trailing whitespace (empty, at its start, when all whitespace).
pub(crate) fn trim(text: &str, span: Span) -> Span {
    let s = &text[span.range()];
    let t = s.trim_start();
    if t.is_empty() {
        return Span::new(span.start, span.start);
    }
    let start = span.start + (s.len() - t.len());
    Span::new(start, start + t.trim_end().len())
}

/// Cuts `span` at the first of `levels` (unconditionally), then cuts any part over `max` tokens at
/// the next level. Pieces are trimmed; whitespace-only parts are dropped. Only a word run with no
/// whitespace in it can come out over `max`.
pub(crate) fn split(b: &ChunkBuilder<'_>, span: Span, max: usize, levels: &[Level], out: &mut Vec<Piece>) {
    let Some((&level, rest)) = levels.split_first() else {
        let span = trim(b.doc().text.as_str(), span);
        if !span.is_empty() {
            out.push(Piece::new(span, b.count(span)));
        }
        return;
    };
    if level == Level::Words {
        return split_words(b, span, max, out);
    }
    let text = b.doc().text.as_str();
    for part in cut(text, span, level) {
        let part = trim(text, part);
        if part.is_empty() {
            continue;
        }
        let tokens = b.count(part);
        if tokens <= max || rest.is_empty() {
            out.push(Piece::new(part, tokens));
        } else {
            split(b, part, max, rest, out);
        }
    }
}

/// The spans of `span` cut at `level` (not `Words`).
fn cut(text: &str, span: Span, level: Level) -> Vec<Span> {
    let s = &text[span.range()];
    let at = span.start;
    match level {
        Level::Sentences => sentences(s).into_iter().map(|r| Span::new(at + r.start, at + r.end)).collect(),
        Level::Lines => line_ranges(s).map(|r| Span::new(at + r.start, at + r.end)).collect(),
        Level::Paragraphs => {
            let mut out = Vec::new();
            let mut open: Option<Range<usize>> = None;
            for r in line_ranges(s) {
                if s[r.clone()].trim().is_empty() {
                    if let Some(p) = open.take() {
                        out.push(Span::new(at + p.start, at + p.end));
                    }
                } else {
                    open = Some(open.map_or(r.clone(), |p| p.start..r.end));
                }
            }
            if let Some(p) = open {
                out.push(Span::new(at + p.start, at + p.end));
            }
            out
        }
        Level::Words => vec![span],
    }
}

/// Lines of `s`, each with its newline.
fn line_ranges(s: &str) -> impl Iterator<Item = Range<usize>> + '_ {
    let mut start = 0;
    std::iter::from_fn(move || {
        if start >= s.len() {
            return None;
        }
        let end = s[start..].find('\n').map_or(s.len(), |i| start + i + 1);
        let r = start..end;
        start = end;
        Some(r)
    })
}

/// Whitespace-separated words of `span`, packed greedily into runs of at most `max` tokens.
pub(crate) fn split_words(b: &ChunkBuilder<'_>, span: Span, max: usize, out: &mut Vec<Piece>) {
    let text = b.doc().text.as_str();
    let s = &text[span.range()];
    let mut run: Option<(usize, usize, usize)> = None; // start, end, tokens
    let mut word_start: Option<usize> = None;
    let mut flush_word = |ws: usize, we: usize, run: &mut Option<(usize, usize, usize)>| {
        let t = b.count(Span::new(span.start + ws, span.start + we));
        match run {
            Some((rs, re, rt)) if *rt + t <= max => {
                *re = we;
                *rt += t;
                let _ = rs;
            }
            Some((rs, re, rt)) => {
                out.push(Piece::new(Span::new(span.start + *rs, span.start + *re), *rt));
                *run = Some((ws, we, t));
            }
            None => *run = Some((ws, we, t)),
        }
    };
    for (i, c) in s.char_indices() {
        match (c.is_whitespace(), word_start) {
            (true, Some(ws)) => {
                flush_word(ws, i, &mut run);
                word_start = None;
            }
            (false, None) => word_start = Some(i),
            _ => {}
        }
    }
    if let Some(ws) = word_start {
        flush_word(ws, s.len(), &mut run);
    }
    if let Some((rs, re, rt)) = run {
        out.push(Piece::new(Span::new(span.start + rs, span.start + re), rt));
    }
}

/// Packs `pieces` greedily into groups (ranges of piece indices) of at most `target` estimated
/// tokens; a piece over `target` gets a group of its own. A `glue_next` piece stays with the next
/// one while the pair fits in `max`; a `break_before` piece starts a group. A last group under
/// `target / 8` merges into the previous one when the two fit in `max`.
pub(crate) fn pack(pieces: &[Piece], target: usize, max: usize) -> Vec<Range<usize>> {
    let mut groups: Vec<Range<usize>> = Vec::new();
    let mut start = 0;
    let mut sum = 0;
    for (i, p) in pieces.iter().enumerate() {
        if i > start {
            let glued = pieces[i - 1].glue_next && sum + p.tokens <= max;
            if p.break_before || (sum + p.tokens > target && !glued) {
                groups.push(start..i);
                start = i;
                sum = 0;
            }
        }
        sum += p.tokens;
    }
    if start < pieces.len() {
        groups.push(start..pieces.len());
    }
    if groups.len() >= 2 {
        let n = groups.len();
        let tokens = |r: &Range<usize>| pieces[r.clone()].iter().map(|p| p.tokens).sum::<usize>();
        let (prev, last) = (&groups[n - 2], &groups[n - 1]);
        if !pieces[last.start].break_before && tokens(last) < target / 8 && tokens(prev) + tokens(last) <= max
        {
            let merged = prev.start..last.end;
            groups.truncate(n - 2);
            groups.push(merged);
        }
    }
    groups
}

/// A finished chunk's extent: its span and exact tokens, and the pieces it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Packed {
    pub span: Span,
    pub tokens: usize,
    pub pieces: Range<usize>,
}

/// Spans of `groups`, counted exactly; a group whose exact count exceeds `max` is halved (by
/// estimated tokens) until it fits or holds one piece.
pub(crate) fn finalize(
    b: &ChunkBuilder<'_>,
    pieces: &[Piece],
    groups: Vec<Range<usize>>,
    max: usize,
) -> Vec<Packed> {
    let mut out = Vec::with_capacity(groups.len());
    let mut stack: Vec<Range<usize>> = groups.into_iter().rev().collect();
    while let Some(g) = stack.pop() {
        let span = Span::new(pieces[g.start].span.start, pieces[g.end - 1].span.end);
        let tokens = b.count(span);
        if tokens > max && g.len() > 1 {
            let total: usize = pieces[g.clone()].iter().map(|p| p.tokens).sum();
            let mut mid = g.start + 1;
            let mut acc = pieces[g.start].tokens;
            while mid < g.end - 1 && acc + pieces[mid].tokens <= total / 2 {
                acc += pieces[mid].tokens;
                mid += 1;
            }
            stack.push(mid..g.end);
            stack.push(g.start..mid);
            continue;
        }
        out.push(Packed { span, tokens, pieces: g });
    }
    out
}

/// Moves each chunk's start (but the first's) back into the previous chunk by about `overlap`
/// tokens (rounded to the nearest whole sentence), in whole sentences of the previous chunk but
/// never its first, while the chunk stays within `max`.
pub(crate) fn overlap(b: &ChunkBuilder<'_>, chunks: &mut [Packed], overlap: usize, max: usize) {
    if overlap == 0 {
        return;
    }
    let text = b.doc().text.as_str();
    let mut prev_core: Option<Span> = None;
    for chunk in chunks.iter_mut() {
        let core = chunk.span;
        if let Some(prev) = prev_core {
            let s = &text[prev.range()];
            let mut acc = 0;
            let mut start = None;
            // Never the previous chunk's first sentence: a child starts after its predecessor.
            for r in sentences(s).into_iter().skip(1).rev() {
                if acc >= overlap {
                    break;
                }
                let t = b.count(Span::new(prev.start + r.start, prev.start + r.end));
                let closer = acc + t <= overlap || acc + t - overlap < overlap - acc;
                if !closer {
                    break;
                }
                acc += t;
                start = Some(prev.start + r.start);
            }
            if let Some(start) = start {
                let span = Span::new(start, core.end);
                let tokens = b.count(span);
                if tokens <= max {
                    chunk.span = span;
                    chunk.tokens = tokens;
                }
            }
        }
        prev_core = Some(core);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::testdoc::md;
    use crate::chunk::WordCounter;

    fn texts<'a>(text: &'a str, pieces: &[Piece]) -> Vec<&'a str> {
        pieces.iter().map(|p| &text[p.span.range()]).collect()
    }

    #[test]
    fn split_cuts_levels_and_falls_back_to_words() {
        let doc = md("One two three. Four five six seven eight nine ten.\nEleven");
        let b = ChunkBuilder::new(&doc, &WordCounter);
        let all = Span::new(0, doc.text.len());
        let mut out = Vec::new();
        split(&b, all, 4, PROSE, &mut out);
        assert_eq!(
            texts(&doc.text, &out),
            ["One two three.", "Four five six seven", "eight nine ten.", "Eleven"],
            "the long sentence is cut into word runs of at most 4 tokens"
        );
        assert!(out.iter().all(|p| p.tokens <= 4));
        let mut lines = Vec::new();
        split(&b, all, 100, LINES, &mut lines);
        assert_eq!(lines.len(), 2);
    }

    #[test]
    fn paragraphs_cut_at_blank_lines() {
        let doc = md("fn a() {}\n\n  \nfn b() {\n}\n");
        let b = ChunkBuilder::new(&doc, &WordCounter);
        let mut out = Vec::new();
        split(&b, Span::new(0, doc.text.len()), 100, CODE, &mut out);
        assert_eq!(texts(&doc.text, &out), ["fn a() {}", "fn b() {\n}"]);
    }

    #[test]
    fn an_unsplittable_word_stays_whole() {
        let doc = md("a-b-c-d-e-f-g-h x");
        let b = ChunkBuilder::new(&doc, &WordCounter);
        let mut out = Vec::new();
        split_words(&b, Span::new(0, doc.text.len()), 3, &mut out);
        assert_eq!(texts(&doc.text, &out), ["a-b-c-d-e-f-g-h", "x"]);
    }

    #[test]
    fn pack_glues_headings_and_merges_tiny_tails() {
        let p = |t| Piece::new(Span::new(0, 0), t);
        let pieces = [p(10), p(10), p(4), p(2)];
        assert_eq!(pack(&pieces, 24, 30), vec![0..4], "the tiny tail merges back");
        assert_eq!(pack(&pieces, 24, 25), vec![0..3, 3..4], "no merge when the budget is full");
        let mut heading = p(2);
        heading.glue_next = true;
        assert_eq!(pack(&[heading, p(9)], 10, 20), vec![0..2]);
        assert_eq!(pack(&[heading, p(18)], 10, 20), vec![0..2]);
        assert_eq!(pack(&[heading, p(19)], 10, 20), vec![0..1, 1..2]);
        assert_eq!(pack(&[heading, p(25)], 10, 20), vec![0..1, 1..2]);
        let mut hard = p(1);
        hard.break_before = true;
        assert_eq!(pack(&[p(1), hard], 10, 20), vec![0..1, 1..2]);
    }
}
