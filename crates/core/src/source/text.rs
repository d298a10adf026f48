//! Plain text (`.txt`, `.rst`, `.log`, extensionless files): paragraphs separated by blank lines,
//! headings found by shape, and lists.
//!
//! The normalised text is the file itself (LF line ends, no BOM, no NULs). Headings are:
//! - numbered section lines: `1. Scope`, `4.2 Travel insurance`, `Section 3 — Claims`,
//!   `ARTICLE IV` (short, no final period, title starting with a capital, followed by text);
//!   the level is the depth of the number (`4.2` is level 2);
//! - setext-style underlined lines (`Title` over `=====` is level 1, over `-----` level 2); the
//!   heading's span covers both lines;
//! - a short ALL CAPS line followed by text (level 1).
//!
//! Consecutive lines starting with a bullet (`-`, `*`, `•`, `+`) or an enumerator (`1)`, `a.`,
//! `(i)`...) form one List block, with indented continuation lines; list items separated by single
//! blank lines stay in the same list. The PDF parser runs the same analysis page by page
//! ([`blocks_in`]). May import `types` only (through `source`).

use std::collections::BTreeMap;
use std::path::Path;

use super::{decode_utf8, finish, title_from_path, Parser, RawBlock, SkipReason};
use crate::types::{BlockKind, ParsedDocument, Span};

/// The plain-text parser.
#[derive(Debug, Clone, Copy, Default)]
pub struct TextParser;

impl Parser for TextParser {
    fn name(&self) -> &'static str {
        "text"
    }

    fn parse(&self, path: &Path, bytes: &[u8]) -> Result<ParsedDocument, SkipReason> {
        let text = decode_utf8(bytes)?;
        let blocks = blocks_in(&text, 0, text.len(), None, Style::Plain);
        let title = match blocks.first() {
            Some((BlockKind::Heading { title, .. }, _, _)) => title.clone(),
            _ => title_from_path(path),
        };
        Ok(finish(self.name(), title, text, blocks, BTreeMap::new()))
    }
}

/// One line of the text: its byte range (without the line end) and content.
#[derive(Debug, Clone, Copy)]
struct Line<'a> {
    start: usize,
    end: usize,
    s: &'a str,
}

impl Line<'_> {
    fn is_blank(&self) -> bool {
        self.s.trim().is_empty()
    }
}

/// Where a text comes from, which tunes the heading rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Style {
    /// A plain text file.
    Plain,
    /// Text extracted from a PDF page: a short title-like line standing alone before text is a
    /// level-2 heading (PDF headings lose their typography), and a lone page number is dropped.
    Pdf,
}

/// Blocks of `text[start..end]` (spans are offsets into the whole `text`), each with `page`.
/// `start` and `end` must lie on line starts / ends.
pub(crate) fn blocks_in(text: &str, start: usize, end: usize, page: Option<u32>, style: Style) -> Vec<RawBlock> {
    let mut lines = Vec::new();
    let mut pos = start;
    for s in text[start..end].split('\n') {
        lines.push(Line { start: pos, end: pos + s.len(), s });
        pos += s.len() + 1;
    }
    let mut out: Vec<RawBlock> = Vec::new();
    let mut i = 0;
    // Whether the last block emitted is a list that a following list group may extend.
    let mut list_open = false;
    while i < lines.len() {
        if lines[i].is_blank() {
            i += 1;
            continue;
        }
        // A group of consecutive non-blank lines: lines[i..j].
        let mut j = i;
        while j < lines.len() && !lines[j].is_blank() {
            j += 1;
        }
        let text_after = lines[j..].iter().any(|l| !l.is_blank());
        let group = &lines[i..j];
        if style == Style::Pdf && group.len() == 1 {
            let line = group[0];
            if is_folio(line.s) {
                i = j;
                continue;
            }
            if text_after && heading_line(line.s).is_none() && is_title_line(line.s) {
                let title = line.s.trim().to_string();
                out.push((BlockKind::Heading { level: 2, title }, Span::new(line.start, line.end), page));
                list_open = false;
                i = j;
                continue;
            }
        }
        let mut k = 0;
        let mut para_start: Option<usize> = None;
        let flush_para = |out: &mut Vec<RawBlock>, from: Option<usize>, to: usize| {
            if let Some(from) = from {
                out.push((BlockKind::Paragraph, Span::new(group[from].start, group[to - 1].end), page));
            }
        };
        while k < group.len() {
            let line = group[k];
            let next = group.get(k + 1);
            let followed_by_text = next.is_some() || text_after;
            // Setext heading: text over an underline.
            if let Some(level) = next.and_then(|n| underline_level(n.s)) {
                if underline_level(line.s).is_none() && !is_list_item(line.s) && line.s.trim().len() <= 120 {
                    flush_para(&mut out, para_start.take(), k);
                    let title = line.s.trim().to_string();
                    out.push((BlockKind::Heading { level, title }, Span::new(line.start, group[k + 1].end), page));
                    list_open = false;
                    k += 2;
                    continue;
                }
            }
            // A lone underline or rule (`-----`): not content.
            if underline_level(line.s).is_some() || is_rule(line.s) {
                flush_para(&mut out, para_start.take(), k);
                k += 1;
                continue;
            }
            let next_is_item = next.is_some_and(|n| is_list_item(n.s));
            if followed_by_text && !next_is_item {
                if let Some((level, title)) = heading_line(line.s) {
                    flush_para(&mut out, para_start.take(), k);
                    out.push((BlockKind::Heading { level, title }, Span::new(line.start, line.end), page));
                    list_open = false;
                    k += 1;
                    continue;
                }
            }
            if is_list_item(line.s) {
                flush_para(&mut out, para_start.take(), k);
                let mut m = k + 1;
                while m < group.len() && (is_list_item(group[m].s) || group[m].s.starts_with([' ', '\t'])) {
                    m += 1;
                }
                let span = Span::new(line.start, group[m - 1].end);
                match out.last_mut() {
                    // Items separated by one blank line continue the list above.
                    Some((BlockKind::List, prev, _))
                        if list_open && k == 0 && blank_lines_between(text, prev.end, span.start) <= 1 =>
                    {
                        *prev = prev.cover(span);
                    }
                    _ => out.push((BlockKind::List, span, page)),
                }
                list_open = m == group.len();
                k = m;
                continue;
            }
            if para_start.is_none() {
                para_start = Some(k);
                list_open = false;
            }
            k += 1;
        }
        flush_para(&mut out, para_start.take(), group.len());
        i = j;
    }
    out
}

/// Blank lines between two offsets (the line ends between them, less one).
fn blank_lines_between(text: &str, from: usize, to: usize) -> usize {
    text.get(from..to).map_or(usize::MAX, |s| s.matches('\n').count().saturating_sub(1))
}

/// The level of a setext underline (`===` is 1, `---` is 2), at least three characters.
fn underline_level(line: &str) -> Option<u8> {
    let t = line.trim();
    if t.len() < 3 {
        return None;
    }
    if t.bytes().all(|b| b == b'=') {
        Some(1)
    } else if t.bytes().all(|b| b == b'-') {
        Some(2)
    } else {
        None
    }
}

/// A horizontal rule made of `*`, `_` or `~`.
fn is_rule(line: &str) -> bool {
    let t: String = line.chars().filter(|c| !c.is_whitespace()).collect();
    t.len() >= 3 && (t.bytes().all(|b| b == b'*') || t.bytes().all(|b| b == b'_') || t.bytes().all(|b| b == b'~'))
}

/// Whether a line starts a list item: a bullet, or an enumerator such as `1)`, `2.`, `a)`, `(iv)`,
/// followed by a space.
pub(crate) fn is_list_item(line: &str) -> bool {
    let t = line.trim_start();
    if ["- ", "* ", "• ", "+ ", "– ", "· ", "◦ ", "▪ "].iter().any(|b| t.starts_with(b)) {
        return true;
    }
    let (marker, rest) = match t.split_once(' ') {
        Some(x) => x,
        None => return false,
    };
    if rest.trim().is_empty() {
        return false;
    }
    let inner = marker.strip_prefix('(').and_then(|m| m.strip_suffix(')'));
    let body = match inner {
        Some(b) => b,
        None => match marker.strip_suffix(')').or_else(|| marker.strip_suffix('.')) {
            Some(b) => b,
            None => return false,
        },
    };
    let numeric = !body.is_empty() && body.len() <= 3 && body.bytes().all(|b| b.is_ascii_digit());
    let letter = body.len() == 1 && body.bytes().all(|b| b.is_ascii_lowercase());
    let roman = inner.is_some() && !body.is_empty() && body.len() <= 5 && body.bytes().all(|b| b"ivxlc".contains(&b));
    numeric || letter || roman
}

/// A page number on a line of its own (`7`, `- 7 -`, `Page 7`, `7 of 12`).
fn is_folio(line: &str) -> bool {
    let t = line.trim().trim_matches(|c: char| c == '-' || c == '–' || c.is_whitespace());
    let t = t.strip_prefix("Page ").or_else(|| t.strip_prefix("page ")).unwrap_or(t);
    let t = t.split_once(" of ").map_or(t, |(a, _)| a);
    !t.is_empty() && t.len() <= 5 && (t.bytes().all(|b| b.is_ascii_digit()) || t.bytes().all(|b| b"ivxlc".contains(&b)))
}

/// A short line that reads as a title: at most eight words, starting with a capital, no final
/// punctuation.
fn is_title_line(line: &str) -> bool {
    let t = line.trim();
    let words = t.split_whitespace().count();
    (1..=8).contains(&words)
        && t.chars().count() <= 60
        && t.chars().next().is_some_and(char::is_uppercase)
        && !t.ends_with(['.', ',', ';', ':', '-', '?', '!'])
        && !is_list_item(t)
}

/// Words that introduce a numbered section.
const SECTION_WORDS: [&str; 6] = ["section", "chapter", "article", "part", "appendix", "annex"];

/// Whether a line looks like a heading, with its level and title.
fn heading_line(line: &str) -> Option<(u8, String)> {
    let t = line.trim();
    if t.is_empty() || t.chars().count() > 80 || t.ends_with(['.', ',', ';']) || line.starts_with([' ', '\t']) {
        return None;
    }
    // `4.2 Travel insurance`, `1. Scope`
    let number_len = t.bytes().take_while(|b| b.is_ascii_digit() || *b == b'.').count();
    if number_len > 0 && t.as_bytes()[0].is_ascii_digit() {
        let number = t[..number_len].trim_end_matches('.');
        let rest = &t[number_len..];
        let title = rest.trim_start();
        if rest.starts_with([' ', '\t'])
            && !number.contains("..")
            && number.split('.').all(|p| !p.is_empty() && p.len() <= 3)
            && title.chars().next().is_some_and(char::is_uppercase)
            && title.split_whitespace().count() <= 8
            && t.chars().count() <= 60
        {
            let level = number.split('.').count().clamp(1, 6) as u8;
            return Some((level, t.to_string()));
        }
        return None;
    }
    // `Section 3 — Claims`, `ARTICLE IV`
    let mut words = t.split_whitespace();
    if let (Some(word), Some(num)) = (words.next(), words.next()) {
        let is_word = SECTION_WORDS.iter().any(|w| word.eq_ignore_ascii_case(w))
            && (word.chars().next().is_some_and(char::is_uppercase));
        let num = num.trim_end_matches([':', '.', '—', '-']);
        let numeric = !num.is_empty() && num.bytes().all(|b| b.is_ascii_digit() || b == b'.');
        let roman = !num.is_empty() && num.bytes().all(|b| b"IVXLC".contains(&b));
        let letter = num.len() == 1 && num.bytes().all(|b| b.is_ascii_uppercase());
        if is_word && (numeric || roman || letter) && t.split_whitespace().count() <= 12 {
            let level = if numeric { num.trim_end_matches('.').split('.').count().clamp(1, 6) as u8 } else { 1 };
            return Some((level, t.to_string()));
        }
    }
    // `GENERAL CONDITIONS`
    let letters = t.chars().filter(|c| c.is_alphabetic()).count();
    if letters >= 3
        && t.chars().count() <= 60
        && t.chars().all(|c| !c.is_alphabetic() || c.is_uppercase())
        && !is_list_item(t)
        && !t.ends_with(':')
    {
        return Some((1, t.to_string()));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::testutil::check_document;
    use crate::types::Lines;

    fn parse(s: &str) -> ParsedDocument {
        let doc = TextParser.parse(Path::new("/docs/policy.txt"), s.as_bytes()).unwrap();
        check_document(&doc);
        doc
    }

    fn summary(doc: &ParsedDocument) -> Vec<(String, &str)> {
        doc.blocks
            .iter()
            .map(|b| {
                let kind = match &b.kind {
                    BlockKind::Heading { level, .. } => format!("h{level}"),
                    k => format!("{k:?}").to_lowercase(),
                };
                (kind, &doc.text[b.span.range()])
            })
            .collect()
    }

    #[test]
    fn numbered_sections_paragraphs_and_lists() {
        let src = "TRAVEL POLICY\n\n1. Scope\nThis policy applies to all staff\nwho travel for work.\n\n\
                   4.2 Travel insurance\n\nStaff are covered by:\n- medical costs\n- lost luggage\n\n- cancellation\n\n\
                   Section 3 — Claims\nSend claims within 30 days.\n\nARTICLE IV\nFinal words.\n";
        let doc = parse(src);
        assert_eq!(doc.title, "TRAVEL POLICY");
        assert_eq!(
            summary(&doc),
            vec![
                ("h1".into(), "TRAVEL POLICY"),
                ("h1".into(), "1. Scope"),
                ("paragraph".into(), "This policy applies to all staff\nwho travel for work."),
                ("h2".into(), "4.2 Travel insurance"),
                ("paragraph".into(), "Staff are covered by:"),
                ("list".into(), "- medical costs\n- lost luggage\n\n- cancellation"),
                ("h1".into(), "Section 3 — Claims"),
                ("paragraph".into(), "Send claims within 30 days."),
                ("h1".into(), "ARTICLE IV"),
                ("paragraph".into(), "Final words."),
            ]
        );
        assert_eq!(doc.blocks[2].lines, Lines { first: 4, last: 5 });
        let BlockKind::Heading { title, .. } = &doc.blocks[3].kind else { panic!() };
        assert_eq!(title, "4.2 Travel insurance");
    }

    #[test]
    fn setext_headings_cover_both_lines() {
        let doc = parse("Meeting notes\n=============\n\nAgenda\n------\nBudget review.\n");
        assert_eq!(
            summary(&doc),
            vec![
                ("h1".into(), "Meeting notes\n============="),
                ("h2".into(), "Agenda\n------"),
                ("paragraph".into(), "Budget review."),
            ]
        );
        assert_eq!(doc.title, "Meeting notes");
        assert_eq!(doc.blocks[0].lines, Lines { first: 1, last: 2 });
    }

    #[test]
    fn numbered_lists_are_not_headings() {
        let doc =
            parse("Steps:\n1. Open the form\n2. Fill it in\n3) Send it\n\nThe amount is\n4.2 million per year.\n");
        assert_eq!(
            summary(&doc),
            vec![
                ("paragraph".into(), "Steps:"),
                ("list".into(), "1. Open the form\n2. Fill it in\n3) Send it"),
                ("paragraph".into(), "The amount is\n4.2 million per year."),
            ]
        );
        assert_eq!(doc.title, "policy");
    }

    #[test]
    fn a_heading_needs_text_after_it() {
        let doc = parse("Some words here.\n\nCONCLUSION\n");
        assert!(doc.blocks.iter().all(|b| b.kind == BlockKind::Paragraph));
    }

    #[test]
    fn crlf_and_unicode_text() {
        let doc = parse("Größe\r\n=====\r\n\r\nÜber café — naïve résumé.\r\n");
        assert_eq!(doc.text, "Größe\n=====\n\nÜber café — naïve résumé.\n");
        assert_eq!(summary(&doc)[1].1, "Über café — naïve résumé.");
    }

    proptest::proptest! {
        #[test]
        fn invariants_hold_on_random_text(s in "([a-zA-Z0-9 .\\-=*•()é—]{0,12}(\n|\r\n|\r){0,3}){0,30}") {
            if let Ok(doc) = TextParser.parse(Path::new("x.txt"), s.as_bytes()) {
                check_document(&doc);
            }
        }

        #[test]
        fn invariants_hold_on_arbitrary_strings(s in "\\PC{0,200}") {
            if let Ok(doc) = TextParser.parse(Path::new("x.txt"), s.as_bytes()) {
                check_document(&doc);
            }
        }
    }
}
