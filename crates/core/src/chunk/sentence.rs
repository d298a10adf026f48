//! Sentence segmentation: UAX#29 sentence boundaries (unicode-segmentation's
//! `split_sentence_bound_indices`) and a fix-up pass that re-joins its false breaks.
//!
//! Imports nothing from the crate. The ranges returned cover the input exactly, in order; each
//! sentence keeps its trailing whitespace, as UAX#29 does.
//!
//! Re-joined false breaks:
//! - after an abbreviation ("e.g.", "i.e.", "Dr.", "Mr.", "Mrs.", "Ms.", "Prof.", "St.", "vs.",
//!   "No.", "Fig.", "approx.") and after capital initials ("J. Smith", "J.R.R. Tolkien");
//!   "etc.", "Inc." and "Ltd." often end a sentence, so after them a break stands when an
//!   upper-case letter follows;
//! - inside a run of text with no whitespace (a URL such as `https://example.com/a.b?c=d`, an
//!   e-mail address), except after CJK full stops, which need no space after them;
//! - at a single line break (a soft-wrapped line) when the line does not end with sentence-ending
//!   punctuation; a blank line always ends a sentence.
//!
//! Decimals and versions ("3.14", "v1.2.3") are kept whole by UAX#29 itself.
//!
//! ```
//! use ragbox_core::chunk::sentence::sentences;
//! let text = "Dr. Smith paid 3.14 e.g. Euros. Then left.";
//! let parts: Vec<&str> = sentences(text).into_iter().map(|r| &text[r]).collect();
//! assert_eq!(parts, ["Dr. Smith paid 3.14 e.g. Euros. ", "Then left."]);
//! ```

use std::ops::Range;

use unicode_segmentation::UnicodeSegmentation;

/// Abbreviations after which a sentence never ends (lower-case, with their dot).
const ABBREVIATIONS: &[&str] = &[
    "e.g.", "i.e.", "dr.", "mr.", "mrs.", "ms.", "prof.", "st.", "vs.", "no.", "fig.", "approx.", "cf.",
    "al.",
];

/// Abbreviations that often end a sentence: a break after them stands before an upper-case letter.
const FINAL_ABBREVIATIONS: &[&str] = &["etc.", "inc.", "ltd."];

/// Byte ranges of the sentences of `text`, in order, covering it exactly.
pub fn sentences(text: &str) -> Vec<Range<usize>> {
    let mut out: Vec<Range<usize>> = Vec::new();
    for (start, s) in text.split_sentence_bound_indices() {
        let range = start..start + s.len();
        match out.last_mut() {
            Some(prev) if false_break(&text[prev.clone()], s) => prev.end = range.end,
            _ => out.push(range),
        }
    }
    out
}

/// Whether UAX#29's break between `prev` and `next` is false.
fn false_break(prev: &str, next: &str) -> bool {
    let (Some(last), Some(first)) = (prev.chars().next_back(), next.chars().next()) else {
        return false;
    };
    // A break with no whitespace at it: inside a URL, an e-mail address, a path.
    if !last.is_whitespace() && !first.is_whitespace() {
        return !matches!(last, '。' | '！' | '？' | '．');
    }
    let body = prev.trim_end();
    let gap = &prev[body.len()..];
    let newlines = gap.matches('\n').count();
    if newlines >= 2 {
        return false; // a blank line: a paragraph break
    }
    let word = body.rsplit(char::is_whitespace).next().unwrap_or("");
    let word = word.trim_start_matches(|c: char| matches!(c, '(' | '[' | '"' | '\'' | '“' | '‘'));
    let lower = word.to_lowercase();
    if ABBREVIATIONS.contains(&lower.as_str()) || is_initials(word) {
        return true;
    }
    if FINAL_ABBREVIATIONS.contains(&lower.as_str()) {
        return !first_letter_is_upper(next);
    }
    if newlines == 1 {
        // A soft line wrap: the line does not end a sentence.
        let end = body
            .trim_end_matches(|c: char| matches!(c, '"' | '\'' | ')' | ']' | '”' | '’' | '»' | '*' | '_'));
        return !end.ends_with(['.', '!', '?', '。', '！', '？', '…', ':', ';']);
    }
    false
}

/// "J." or "J.R.R.": one or more single upper-case letters, each followed by a dot.
fn is_initials(word: &str) -> bool {
    let mut chars = word.chars();
    let mut any = false;
    loop {
        match (chars.next(), chars.next()) {
            (None, _) => return any,
            (Some(c), Some('.')) if c.is_uppercase() => any = true,
            _ => return false,
        }
    }
}

fn first_letter_is_upper(text: &str) -> bool {
    text.chars().find(|c| c.is_alphanumeric()).is_some_and(char::is_uppercase)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(text: &str) -> Vec<&str> {
        let ranges = sentences(text);
        let mut at = 0;
        for r in &ranges {
            assert_eq!(r.start, at, "ranges cover the text in order");
            at = r.end;
        }
        assert_eq!(at, text.len());
        ranges.into_iter().map(|r| &text[r]).collect()
    }

    #[test]
    fn plain_sentences() {
        assert_eq!(split("One two. Three four! Five? Six"), ["One two. ", "Three four! ", "Five? ", "Six"]);
        assert!(split("").is_empty());
    }

    #[test]
    fn abbreviations_do_not_end_sentences() {
        for text in [
            "Bring fruit, e.g. Apples and pears. ",
            "That is, i.e. Paris is fine. ",
            "We met Dr. Jones at noon. ",
            "Ask Mr. Brown and Mrs. Green and Ms. White. ",
            "Prof. Plum lives on St. James Street. ",
            "It was Ajax vs. Barcelona yesterday. ",
            "See No. 5 in Fig. 3 for details. ",
            "It costs approx. Ten pounds. ",
            "The letter went to J. Smith today. ",
            "A book by J.R.R. Tolkien is long. ",
        ] {
            let full = format!("{text}Next one.");
            assert_eq!(split(&full), [text, "Next one."], "{full}");
        }
    }

    #[test]
    fn final_abbreviations_end_sentences_before_capitals() {
        assert_eq!(split("Apples, pears etc. Then we left."), ["Apples, pears etc. ", "Then we left."]);
        assert_eq!(split("Apples, pears etc. and more."), ["Apples, pears etc. and more."]);
        assert_eq!(split("Made by Acme Inc. (the maker)."), ["Made by Acme Inc. (the maker)."]);
    }

    #[test]
    fn decimals_and_versions_stay_whole() {
        assert_eq!(
            split("Pi is 3.14 today. Version v1.2.3 is out."),
            ["Pi is 3.14 today. ", "Version v1.2.3 is out."]
        );
        assert_eq!(split("It grew 2.5% in Q3. Fine."), ["It grew 2.5% in Q3. ", "Fine."]);
    }

    #[test]
    fn urls_and_emails_stay_whole() {
        let text = "See https://example.com/a.b?c=d. Then mail bob.smith@example.co.uk. Done!";
        assert_eq!(
            split(text),
            ["See https://example.com/a.b?c=d. ", "Then mail bob.smith@example.co.uk. ", "Done!"]
        );
        assert_eq!(split("Go to www.Example.com/Index.Html now."), ["Go to www.Example.com/Index.Html now."]);
    }

    #[test]
    fn soft_wrapped_lines_join_but_blank_lines_break() {
        assert_eq!(
            split("This sentence is\nwrapped over lines. Next."),
            ["This sentence is\nwrapped over lines. ", "Next."]
        );
        assert_eq!(split("First line ends.\nSecond line."), ["First line ends.\n", "Second line."]);
        assert_eq!(split("A heading\n\nBody text."), ["A heading\n\n", "Body text."]);
    }

    #[test]
    fn multibyte_text() {
        assert_eq!(
            split("Café au lait. 中文句子。第二句。Émoji 🦀 ok."),
            ["Café au lait. ", "中文句子。", "第二句。", "Émoji 🦀 ok."]
        );
    }
}
