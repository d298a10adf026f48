//! Citations in a generated answer: markers found and checked against the passage ids the prompt
//! gave, invalid ones removed, valid ones written one way (`[1][2]`), and the answer split into
//! sentences that each know the ids they cite.
//!
//! May import `chunk` (for the sentence splitter). Recognises the forms small models produce:
//! `[1]`, `[1][2]`, `[1, 2]`, `[1-3]` and `[1–3]` (ranges expand), `[Passage 1]`,
//! `[passage 1, passage 2]`, `[id=1]`, `[id="1"]` and `【1】`. Brackets that are not citations
//! (`[note]`, markdown links `[text](url)`, checkboxes `[ ]`) and brackets inside code spans are
//! left as they are.
//!
//! ```
//! use ragbox_core::answer::cite::parse_answer;
//! let parsed = parse_answer("Paris is the capital [1, 7]. It is large.[Passage 2]", &[1, 2]);
//! assert_eq!(parsed.text, "Paris is the capital [1]. It is large.[2]");
//! assert_eq!(parsed.cited, [1, 2]);
//! assert_eq!(parsed.invalid, ["7"]);
//! assert_eq!(parsed.sentences[1].text, "It is large.[2]");
//! assert_eq!(parsed.sentences[1].citations, [2]);
//! ```

use std::fmt::Write as _;
use std::ops::Range;

use serde::Serialize;

use crate::chunk::sentence::sentences;

/// One sentence of an answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AnswerSentence {
    /// The sentence with its citation markers kept, trimmed; a list item keeps its bullet.
    pub text: String,
    /// The valid ids it cites, in order of use, without repeats.
    pub citations: Vec<usize>,
    /// Its byte range in [`ParsedAnswer::text`]: `&parsed.text[span] == text`.
    pub span: Range<usize>,
}

/// An answer with its citations checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ParsedAnswer {
    /// The answer, trimmed, with every invalid citation removed (and the whitespace around a
    /// removed marker tidied) and every valid marker written as `[1][2]`.
    pub text: String,
    /// Its sentences, in order; a citation marker right after a sentence's end ("... capital. [1]")
    /// belongs to that sentence, and each list item is a sentence of its own (or more).
    pub sentences: Vec<AnswerSentence>,
    /// The valid ids cited anywhere, in order of first use.
    pub cited: Vec<usize>,
    /// Each invalid id as written ("7", "0", a range such as "1-99"), in order; an id cited
    /// twice in the answer appears twice.
    pub invalid: Vec<String>,
}

impl ParsedAnswer {
    /// The sentences that cite nothing.
    pub fn uncited_sentences(&self) -> impl Iterator<Item = &AnswerSentence> {
        self.sentences.iter().filter(|s| s.citations.is_empty())
    }
}

/// Parses `answer`, keeping citations of the ids in `valid` and removing all others.
pub fn parse_answer(answer: &str, valid: &[usize]) -> ParsedAnswer {
    let mut text = answer.trim().to_string();
    let mut invalid = Vec::new();
    // Removing a marker can join brackets into a new one ("[[9]1]"): repeat until nothing changes.
    for _ in 0..16 {
        let markers = scan(&text);
        let (next, removed) = rebuild(&text, &markers, valid);
        invalid.extend(removed);
        if next == text {
            break;
        }
        text = next.trim().to_string();
    }
    let markers: Vec<Marker> = scan(&text)
        .into_iter()
        .map(|m| Marker { ids: m.items.iter().filter_map(|i| i.valid_id(valid)).collect(), ..m })
        .collect();

    let mut cited = Vec::new();
    for id in markers.iter().flat_map(|m| m.ids.iter()) {
        if !cited.contains(id) {
            cited.push(*id);
        }
    }

    let sentences = split(&text, &markers)
        .into_iter()
        .map(|span| {
            let mut citations = Vec::new();
            for m in markers.iter().filter(|m| span.contains(&m.range.start)) {
                for id in &m.ids {
                    if !citations.contains(id) {
                        citations.push(*id);
                    }
                }
            }
            AnswerSentence { text: text[span.clone()].to_string(), citations, span }
        })
        .collect();
    let sentences = inherit_leading_markers(&text, &markers, sentences);
    ParsedAnswer { text, sentences, cited, invalid }
}

/// Small models often cite in front ("[1] Claims are due in 30 days. Late ones need approval."):
/// a marker that opens a line covers the uncited sentences after it on the same line.
fn inherit_leading_markers(text: &str, markers: &[Marker], mut sentences: Vec<AnswerSentence>) -> Vec<AnswerSentence> {
    let mut carry: Option<(Vec<usize>, usize)> = None; // ids, and where their line ends
    for s in sentences.iter_mut() {
        let line_start = text[..s.span.start].rfind('\n').map_or(0, |i| i + 1);
        let opens_line = text[line_start..s.span.start].trim().is_empty();
        let first_marker = markers.iter().find(|m| s.span.contains(&m.range.start));
        let leads = first_marker.is_some_and(|m| text[s.span.start..m.range.start].trim().is_empty()) && opens_line;
        if leads && !s.citations.is_empty() {
            let line_end = text[s.span.start..].find('\n').map_or(text.len(), |i| s.span.start + i);
            carry = Some((s.citations.clone(), line_end));
        } else if let Some((ids, line_end)) = &carry {
            if s.citations.is_empty() && s.span.start < *line_end {
                s.citations = ids.clone();
            } else {
                carry = None;
            }
        }
    }
    sentences
}

/// `sentence` without its citation markers (any id) or list bullet, trimmed: the claim to give a
/// support checker.
pub fn strip_markers(sentence: &str) -> String {
    let mut text = sentence.to_string();
    for _ in 0..16 {
        let markers = scan(&text);
        if markers.is_empty() {
            break;
        }
        text = rebuild(&text, &markers, &[]).0;
    }
    let t = text.trim();
    t[list_marker_len(t).unwrap_or(0)..].trim().to_string()
}

/// Whether `text` holds a citation marker of any id, valid or not.
pub fn has_markers(text: &str) -> bool {
    !scan(text).is_empty()
}

/// One id in a marker.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Item {
    /// A number, and how it was written.
    Id(usize, String),
    /// Something meant as an id that cannot be one (`id=abc`, a reversed or huge range).
    Bad(String),
}

impl Item {
    fn valid_id(&self, valid: &[usize]) -> Option<usize> {
        match self {
            Item::Id(n, _) if valid.contains(n) => Some(*n),
            _ => None,
        }
    }
}

/// A citation marker found in a text.
#[derive(Debug, Clone)]
struct Marker {
    /// Byte range of the whole marker, brackets included.
    range: Range<usize>,
    items: Vec<Item>,
    /// The valid ids among `items` (filled after scanning).
    ids: Vec<usize>,
}

/// Longest span between a marker's brackets, in bytes.
const MAX_MARKER_BODY: usize = 80;
/// Longest range a marker may expand (`[1-20]`); longer ones are invalid as a whole.
const MAX_RANGE: usize = 20;

/// Every citation marker of `text`, in order, outside code spans.
fn scan(text: &str) -> Vec<Marker> {
    let code = code_ranges(text);
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(c) = text[i..].chars().next() {
        if let Some(r) = code.iter().find(|r| r.contains(&i)) {
            i = r.end;
            continue;
        }
        let close = match c {
            '[' => ']',
            '【' => '】',
            _ => {
                i += c.len_utf8();
                continue;
            }
        };
        let body_start = i + c.len_utf8();
        let mut body_end = None;
        for (j, d) in text[body_start..].char_indices() {
            if j > MAX_MARKER_BODY {
                break;
            }
            if d == close {
                body_end = Some(body_start + j);
                break;
            }
            if matches!(d, '[' | ']' | '【' | '】' | '\n') {
                break;
            }
        }
        if let Some(end) = body_end {
            let after = end + close.len_utf8();
            let link = close == ']' && text[after..].starts_with('(');
            if let Some(items) = (!link).then(|| parse_items(&text[body_start..end])).flatten() {
                out.push(Marker { range: i..after, items, ids: Vec::new() });
                i = after;
                continue;
            }
        }
        i = body_start;
    }
    out
}

/// Byte ranges of code spans: a run of backticks up to the next run of as many.
fn code_ranges(text: &str) -> Vec<Range<usize>> {
    let bytes = text.as_bytes();
    let run_at = |i: usize| bytes[i..].iter().take_while(|b| **b == b'`').count();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'`' {
            i += 1;
            continue;
        }
        let n = run_at(i);
        let mut j = i + n;
        let mut end = None;
        while j < bytes.len() {
            if bytes[j] == b'`' {
                let m = run_at(j);
                if m == n {
                    end = Some(j + m);
                    break;
                }
                j += m;
            } else {
                j += 1;
            }
        }
        match end {
            Some(e) => {
                out.push(i..e);
                i = e;
            }
            None => i += n,
        }
    }
    out
}

/// The ids of a marker body such as "1, 2", "Passage 1-3", `id="1"`; `None` when it is not a
/// citation.
fn parse_items(body: &str) -> Option<Vec<Item>> {
    let normal: String = body
        .chars()
        .map(|c| match c {
            '０'..='９' => char::from(b'0' + (c as u32 - '０' as u32) as u8),
            '，' | '、' | '；' | ';' | '&' => ',',
            c => c,
        })
        .collect();
    let normal = normal.replace(" and ", ",");
    let mut items = Vec::new();
    for part in normal.split(',') {
        let part = part.trim();
        if !part.is_empty() {
            items.extend(parse_item(part)?);
        }
    }
    (!items.is_empty()).then_some(items)
}

/// One part of a marker body: an optional label ("Passage", "id="), then a number or a range.
fn parse_item(part: &str) -> Option<Vec<Item>> {
    const LABELS: &[&str] =
        &["passages", "passage", "sources", "source", "documents", "document", "doc", "ids", "id", "ref"];
    let lower = part.to_ascii_lowercase();
    let mut rest = part;
    let mut explicit_id = false;
    for label in LABELS {
        if lower.starts_with(label) && !part[label.len()..].starts_with(char::is_alphabetic) {
            rest = &part[label.len()..];
            explicit_id = label.starts_with("id");
            break;
        }
    }
    let quotes = |c: char| matches!(c, '"' | '\'' | '“' | '”' | '‘' | '’');
    let rest = rest.trim_start_matches(|c: char| c.is_whitespace() || matches!(c, ':' | '=' | '#'));
    let rest = rest.trim_matches(quotes).trim();
    if let Some(n) = number(rest) {
        return Some(vec![Item::Id(n, rest.to_string())]);
    }
    if let Some((a, b)) = rest.split_once(['-', '–', '—']) {
        if let (Some(lo), Some(hi)) = (number(a.trim()), number(b.trim().trim_start_matches(quotes))) {
            return Some(if lo <= hi && hi - lo < MAX_RANGE {
                (lo..=hi).map(|n| Item::Id(n, n.to_string())).collect()
            } else {
                vec![Item::Bad(rest.to_string())]
            });
        }
    }
    let word = !rest.is_empty() && rest.len() <= 16 && rest.chars().all(|c| c.is_alphanumeric() || c == '_');
    (explicit_id && word).then(|| vec![Item::Bad(rest.to_string())])
}

/// One to three ASCII digits.
fn number(s: &str) -> Option<usize> {
    if (1..=3).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit()) {
        s.parse().ok()
    } else {
        None
    }
}

/// `text` with each marker rewritten as its valid ids (`[1][2]`) or, when it has none, removed;
/// also returns the invalid ids removed.
fn rebuild(text: &str, markers: &[Marker], valid: &[usize]) -> (String, Vec<String>) {
    let mut out = String::with_capacity(text.len());
    let mut invalid = Vec::new();
    let mut cursor = 0;
    for m in markers {
        out.push_str(&text[cursor..m.range.start]);
        cursor = m.range.end;
        let mut kept: Vec<usize> = Vec::new();
        let mut bad: Vec<&str> = Vec::new();
        for item in &m.items {
            match (item.valid_id(valid), item) {
                (Some(id), _) if !kept.contains(&id) => kept.push(id),
                (Some(_), _) => {}
                (None, Item::Id(_, w) | Item::Bad(w)) if !bad.contains(&w.as_str()) => bad.push(w),
                (None, _) => {}
            }
        }
        invalid.extend(bad.into_iter().map(str::to_string));
        if kept.is_empty() {
            // Tidy the gap: no space before punctuation or a line end, no doubled space.
            let next = text[cursor..].chars().next();
            if next.is_none_or(|c| c.is_whitespace() || ".,;:!?)]}".contains(c)) {
                out.truncate(out.trim_end_matches([' ', '\t']).len());
            }
            if out.is_empty() || out.ends_with('\n') {
                cursor += text[cursor..].len() - text[cursor..].trim_start_matches([' ', '\t']).len();
            }
        } else {
            for id in kept {
                let _ = write!(out, "[{id}]");
            }
        }
    }
    out.push_str(&text[cursor..]);
    (out, invalid)
}

/// Length of a list bullet ("- ", "* ", "• ", "1. ", "2) ") opening `line`, leading spaces included.
fn list_marker_len(line: &str) -> Option<usize> {
    let body = line.trim_start_matches([' ', '\t']);
    let indent = line.len() - body.len();
    for bullet in ["- ", "* ", "+ ", "• ", "· "] {
        if body.starts_with(bullet) {
            return Some(indent + bullet.len());
        }
    }
    let digits = body.bytes().take_while(u8::is_ascii_digit).count();
    let rest = &body[digits..];
    ((1..=3).contains(&digits) && (rest.starts_with(". ") || rest.starts_with(") "))).then_some(indent + digits + 2)
}

/// Whether `line` is a markdown heading ("# Title").
fn is_heading(line: &str) -> bool {
    let body = line.trim_start_matches('#');
    body.len() < line.len() && line.len() - body.len() <= 6 && body.starts_with(' ')
}

/// Sentence spans of `text` (trimmed, non-empty), markers after a sentence end joined to it.
fn split(text: &str, markers: &[Marker]) -> Vec<Range<usize>> {
    // The splitter sees markers as spaces, so a marker after a full stop ends that sentence,
    // "capital.[1] Berlin" included. Markers are ASCII, so byte offsets stay the same.
    let mut shadow = text.as_bytes().to_vec();
    for m in markers {
        shadow[m.range.clone()].fill(b' ');
    }
    let shadow = String::from_utf8(shadow).expect("markers are ASCII and replaced whole");

    // Blocks: list items and headings start their own, so one line never runs into the next.
    let mut starts = vec![0];
    let mut prev_line: Option<&str> = None;
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        if let Some(prev) = prev_line {
            let indented = line.starts_with([' ', '\t']);
            let item = list_marker_len(prev).is_some() && !indented;
            if list_marker_len(line).is_some() || is_heading(line) || is_heading(prev) || item {
                starts.push(at);
            }
        }
        prev_line = Some(line);
        at += line.len();
    }
    starts.push(text.len());

    // An answer that opens with a marker cites in front ("[1] The limit is EUR 7,500. [2] An
    // allowance of EUR 30 is paid."): there a marker after a full stop opens the next sentence.
    let in_front = markers.first().is_some_and(|m| text[..m.range.start].trim().is_empty());
    let mut out: Vec<Range<usize>> = Vec::new();
    let mut pending: Option<usize> = None;
    for block in starts.windows(2) {
        // A numbered item's "1." is no sentence end: split after the bullet, keep it in the first piece.
        let bullet = list_marker_len(&text[block[0]..block[1]]).unwrap_or(0);
        let (bs, be) = (block[0] + bullet, block[1]);
        for (k, r) in sentences(&shadow[bs..be]).into_iter().enumerate() {
            let start = if k == 0 { block[0] } else { bs + r.start };
            let Some(piece) = text.get(start..bs + r.end) else { continue };
            let lead = piece.len() - piece.trim_start().len();
            let mut end = start + piece.trim_end().len();
            // Cited in front, the markers after this sentence's last word open the next one.
            let mut next = None;
            if in_front {
                let words_end = start + shadow[start..bs + r.end].trim_end().len();
                if words_end > start + lead && words_end < end {
                    next = Some(end - text[words_end..end].trim_start().len());
                    end = words_end;
                }
            }
            let span = start + lead..end;
            if span.is_empty() {
                continue;
            }
            if shadow[span.clone()].trim().is_empty() {
                // Only markers: they cite the sentence before, or in front, the one after.
                match out.last_mut() {
                    Some(last) if !in_front => last.end = span.end,
                    _ => {
                        pending.get_or_insert(span.start);
                    }
                }
                continue;
            }
            out.push(pending.take().unwrap_or(span.start)..span.end);
            pending = next;
        }
    }
    if let Some(start) = pending {
        match out.last_mut() {
            // Markers that close an answer cited in front still cite its last sentence.
            Some(last) => last.end = text.len(),
            None => out.push(start..text.len()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const V: &[usize] = &[1, 2, 3];

    fn texts(p: &ParsedAnswer) -> Vec<&str> {
        p.sentences.iter().map(|s| s.text.as_str()).collect()
    }

    fn check_spans(p: &ParsedAnswer) {
        for s in &p.sentences {
            assert_eq!(&p.text[s.span.clone()], s.text);
        }
    }

    #[test]
    fn forms() {
        let cases: &[(&str, &str, &[usize])] = &[
            ("A [1].", "A [1].", &[1]),
            ("A [1][2].", "A [1][2].", &[1, 2]),
            ("A [1, 2].", "A [1][2].", &[1, 2]),
            ("A [1,2].", "A [1][2].", &[1, 2]),
            ("A [1; 3].", "A [1][3].", &[1, 3]),
            ("A [1-3].", "A [1][2][3].", &[1, 2, 3]),
            ("A [1–3].", "A [1][2][3].", &[1, 2, 3]),
            ("A [2 - 3].", "A [2][3].", &[2, 3]),
            ("A [Passage 1].", "A [1].", &[1]),
            ("A [passage 1, passage 2].", "A [1][2].", &[1, 2]),
            ("A [Passages 1 and 3].", "A [1][3].", &[1, 3]),
            ("A [id=1].", "A [1].", &[1]),
            ("A [id=\"1\"].", "A [1].", &[1]),
            ("A [id: 2].", "A [2].", &[2]),
            ("A [Source 2].", "A [2].", &[2]),
            ("A [#2].", "A [2].", &[2]),
            ("A 【1】.", "A [1].", &[1]),
            ("A 【１，２】.", "A [1][2].", &[1, 2]),
            ("A [1] [1].", "A [1] [1].", &[1]),
            ("A [2, 2, 1].", "A [2][1].", &[2, 1]),
        ];
        for (input, text, cited) in cases {
            let p = parse_answer(input, V);
            assert_eq!(p.text, *text, "{input}");
            assert_eq!(p.cited, *cited, "{input}");
            assert!(p.invalid.is_empty(), "{input}");
            assert_eq!(p.sentences.len(), 1, "{input}");
            assert_eq!(p.sentences[0].citations, *cited, "{input}");
        }
    }

    #[test]
    fn invalid_removed_and_reported() {
        let p = parse_answer("Paris is big [7]. Rome is old [1, 9]. Oslo [0][2] is cold [id=abc].", V);
        assert_eq!(p.text, "Paris is big. Rome is old [1]. Oslo [2] is cold.");
        assert_eq!(p.invalid, ["7", "9", "0", "abc"]);
        assert_eq!(p.cited, [1, 2]);
        assert_eq!(texts(&p), ["Paris is big.", "Rome is old [1].", "Oslo [2] is cold."]);
        assert_eq!(p.sentences[0].citations, Vec::<usize>::new());
        assert_eq!(p.uncited_sentences().map(|s| s.text.as_str()).collect::<Vec<_>>(), ["Paris is big."]);
        check_spans(&p);
    }

    #[test]
    fn removal_tidies_whitespace() {
        let cases = [
            ("Paris [9] is big.", "Paris is big."),
            ("Paris [9].", "Paris."),
            ("Paris. [9]", "Paris."),
            ("Paris.[9] Rome.", "Paris. Rome."),
            ("[9] Paris.", "Paris."),
            ("Paris [9] [1].", "Paris [1]."),
            ("Paris [9][1].", "Paris [1]."),
            ("Paris [1][9].", "Paris [1]."),
            ("Paris [9], Rome.", "Paris, Rome."),
            ("A [9]\nB [9]\n[9] C.", "A\nB\nC."),
            ("[9]", ""),
        ];
        for (input, text) in cases {
            assert_eq!(parse_answer(input, V).text, text, "{input}");
        }
    }

    #[test]
    fn ranges() {
        let p = parse_answer("A [2-5].", V);
        assert_eq!(p.text, "A [2][3].");
        assert_eq!(p.invalid, ["4", "5"]);
        let p = parse_answer("A [3-1]. B [1-99].", V);
        assert_eq!(p.text, "A. B.");
        assert_eq!(p.invalid, ["3-1", "1-99"]);
    }

    #[test]
    fn non_citations_untouched() {
        for t in [
            "See [note] here.",
            "See [the docs](https://example.com/1) now.",
            "Link [1](https://example.com).",
            "- [ ] todo\n- [x] done",
            "Use `arr[1]` and `m[7]` here.",
            "```\nlet a = v[7];\n```",
            "Year [2024] and [p. 3] and [1.5] and [Passage X].",
            "Nested [see [ here.",
            "Unclosed [1 here.",
        ] {
            let p = parse_answer(t, V);
            assert_eq!(p.text, t.trim(), "{t}");
            assert!(p.invalid.is_empty(), "{t}");
            assert!(p.cited.is_empty(), "{t}");
        }
        // A citation inside other brackets is still one.
        let p = parse_answer("Paris (see [1]) is big.", V);
        assert_eq!(p.cited, [1]);
    }

    #[test]
    fn markers_after_the_period_belong_to_the_sentence_before() {
        for input in [
            "Paris is the capital. [1] Berlin is in Germany [2].",
            "Paris is the capital.[1] Berlin is in Germany [2].",
            "Paris is the capital. [1]\nBerlin is in Germany [2].",
            "Paris is the capital.\n\n[1]\n\nBerlin is in Germany [2].",
        ] {
            let p = parse_answer(input, V);
            assert_eq!(p.sentences.len(), 2, "{input}");
            assert_eq!(p.sentences[0].citations, [1], "{input}");
            assert!(p.sentences[0].text.starts_with("Paris is the capital."), "{input}");
            assert!(p.sentences[0].text.ends_with("[1]"), "{input}");
            assert_eq!(p.sentences[1].text, "Berlin is in Germany [2].", "{input}");
            assert_eq!(p.sentences[1].citations, [2], "{input}");
            check_spans(&p);
        }
        let p = parse_answer("Paris is big! [1][2] Is it? [3]", V);
        assert_eq!(texts(&p), ["Paris is big! [1][2]", "Is it? [3]"]);
    }

    #[test]
    fn a_line_opening_marker_covers_the_rest_of_its_line() {
        let p = parse_answer("[1] Claims are due in 30 days. Late ones need approval.\nReceipts are kept.", V);
        let cites: Vec<Vec<usize>> = p.sentences.iter().map(|s| s.citations.clone()).collect();
        assert_eq!(cites, [vec![1], vec![1], vec![]]);
        let p = parse_answer("Due in 30 days [1]. Late ones need approval.", V);
        assert_eq!(p.sentences[1].citations, Vec::<usize>::new(), "a trailing marker covers only its sentence");
    }

    #[test]
    fn an_answer_cited_in_front_gives_each_marker_to_the_sentence_after_it() {
        let p = parse_answer("[1] The limit is EUR 7,500. [2] An allowance of EUR 30 is paid. [3] You must not share it.", V);
        assert_eq!(texts(&p), ["[1] The limit is EUR 7,500.", "[2] An allowance of EUR 30 is paid.", "[3] You must not share it."]);
        let cites: Vec<Vec<usize>> = p.sentences.iter().map(|s| s.citations.clone()).collect();
        assert_eq!(cites, [vec![1], vec![2], vec![3]]);
        check_spans(&p);
        let p = parse_answer("[1] The limit is EUR 7,500. [2]", V);
        assert_eq!(texts(&p), ["[1] The limit is EUR 7,500. [2]"]);
        assert_eq!(p.sentences[0].citations, [1, 2]);
        check_spans(&p);
    }

    #[test]
    fn leading_marker_with_nothing_before_stays() {
        let p = parse_answer("[1] Paris is the capital.", V);
        assert_eq!(texts(&p), ["[1] Paris is the capital."]);
        assert_eq!(p.sentences[0].citations, [1]);
        let p = parse_answer("[1]", V);
        assert_eq!(texts(&p), ["[1]"]);
        assert_eq!(p.sentences[0].citations, [1]);
    }

    #[test]
    fn bullet_lists() {
        let p = parse_answer("Two rules:\n- Item one [1]\n- Item two [2]\n* Item three [3]\n1. Four [1]\n2) Five", V);
        assert_eq!(texts(&p), ["Two rules:", "- Item one [1]", "- Item two [2]", "* Item three [3]", "1. Four [1]", "2) Five"]);
        let cites: Vec<Vec<usize>> = p.sentences.iter().map(|s| s.citations.clone()).collect();
        assert_eq!(cites, [vec![], vec![1], vec![2], vec![3], vec![1], vec![]]);
        check_spans(&p);
        let p = parse_answer("- Item one [1]\n- Item two. Has two sentences [2].\nThat is all.", V);
        assert_eq!(texts(&p), ["- Item one [1]", "- Item two.", "Has two sentences [2].", "That is all."]);
    }

    #[test]
    fn headings_and_multi_line() {
        let p = parse_answer("## Answer\nParis is big [1].\n\nRome is old\nand famous [2].", V);
        assert_eq!(texts(&p), ["## Answer", "Paris is big [1].", "Rome is old\nand famous [2]."]);
        check_spans(&p);
    }

    #[test]
    fn empty_answer() {
        for t in ["", "   \n\t "] {
            let p = parse_answer(t, V);
            assert_eq!(p.text, "");
            assert!(p.sentences.is_empty() && p.cited.is_empty() && p.invalid.is_empty());
        }
    }

    #[test]
    fn nothing_valid() {
        let p = parse_answer("Paris [1].", &[]);
        assert_eq!(p.text, "Paris.");
        assert_eq!(p.invalid, ["1"]);
    }

    #[test]
    fn removal_never_forges_a_marker() {
        let p = parse_answer("A [[9]7] b.", V);
        assert_eq!(p.text, "A b.");
        assert_eq!(p.invalid, ["9", "7"]);
        let p = parse_answer("A [[9]1] b.", V);
        assert_eq!(p.text, "A [1] b.");
        assert_eq!(p.cited, [1]);
    }

    #[test]
    fn strip() {
        assert_eq!(strip_markers("Paris is the capital [1][2]."), "Paris is the capital.");
        assert_eq!(strip_markers("- Item one [Passage 1]"), "Item one");
        assert_eq!(strip_markers("2. Rome [1, 9] is old."), "Rome is old.");
        assert_eq!(strip_markers("See [note] [1]."), "See [note].");
        assert!(has_markers("a [7]") && !has_markers("a [b]"));
    }

    #[test]
    fn serialises() {
        let p = parse_answer("A [1].", V);
        let json = serde_json::to_value(&p).expect("json");
        assert_eq!(json["sentences"][0]["span"]["start"], 0);
        assert_eq!(json["cited"][0], 1);
    }

    proptest::proptest! {
        #[test]
        fn clean_text_and_spans(
            input in "([a-zA-Z .,!?\\-\n]|\\[|\\]|【|】|[0-9]|, |Passage |id=|\\(|\\)|`|\\PC){0,80}",
            valid in proptest::collection::vec(0usize..6, 0..4),
        ) {
            let p = parse_answer(&input, &valid);
            let again = parse_answer(&p.text, &valid);
            proptest::prop_assert!(again.invalid.is_empty(), "{:?} -> {:?}: {:?}", input, p.text, again.invalid);
            proptest::prop_assert_eq!(&again.text, &p.text);
            for s in &p.sentences {
                proptest::prop_assert_eq!(p.text[s.span.clone()].trim(), s.text.as_str());
                proptest::prop_assert!(!s.text.trim().is_empty());
                for id in &s.citations {
                    proptest::prop_assert!(valid.contains(id));
                }
            }
            for id in &p.cited {
                proptest::prop_assert!(valid.contains(id));
            }
        }
    }
}
