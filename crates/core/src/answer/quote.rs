//! What is not an answer, and how a quoted unit reads: [`restates`] tells a reply that only
//! restates the question (the generative reader, used when the tenant has no cross-encoder, takes
//! it for no answer), and [`readable`] writes a table row as "Column: value; …", the way an
//! evidence-first answer quotes it.
//!
//! Imports `answer::focus` (units) and `words` (content words).
//!
//! Why (docs/EVAL.md): a fifth of the 0.5B model's written answers on the held-out dev halves
//! restated the question as a statement ("The passage requires that += on a list creates a new
//! list object."), which reads as an answer and is none.
//!
//! ```
//! use ragbox_core::answer::quote::restates;
//! let q = "Does += on a list create a new list object?";
//! assert!(restates("[1] The passage requires that += on a list creates a new list object.", q));
//! assert!(!restates("[1] No: += mutates the list in place, like extend().", q));
//! assert!(!restates("[1] It does not create a new list object.", q)); // a negation is an answer
//! ```

use std::collections::HashSet;

use serde::Serialize;

use super::segment::Unit;
use crate::words::content_words;

/// Why the model's reply was not taken as the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NotAnswered {
    /// It said the passages do not answer the question.
    Declined,
    /// It held citation markers and no words.
    NoWords,
    /// It restated the question: no word of it that the question lacks.
    RestatedQuestion,
}

/// Words the answer prompt itself puts in the model's mouth ("The passage requires …", "The
/// documents provided …"): they are not an answer's content.
const PROMPT_WORDS: &[&str] = &["passag", "requir", "document", "provid", "state", "say", "answer", "question", "accord"];

/// A negation: "not", "no", "never", "cannot", "n't" …
fn negates(text: &str) -> bool {
    text.split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '’')).any(|w| {
        let w = w.to_lowercase();
        matches!(w.as_str(), "not" | "no" | "never" | "cannot" | "none" | "nothing" | "neither" | "nor" | "without")
            || w.ends_with("n't")
            || w.ends_with("n’t")
    })
}

/// Whether `reply` only restates `question`: it holds no content word (stemmed, stopwords and
/// the prompt's own words left out) that the question lacks, and no negation the question lacks.
/// A bare "Yes." restates too: it carries no rule a reader could check.
pub fn restates(reply: &str, question: &str) -> bool {
    let text = super::cite::strip_markers(reply);
    if negates(&text) && !negates(question) {
        return false;
    }
    let asked = content_words(question);
    let new: HashSet<String> = content_words(&text)
        .into_iter()
        .filter(|w| !asked.contains(w) && !PROMPT_WORDS.iter().any(|p| w.starts_with(p)))
        .collect();
    new.is_empty()
}

/// A table row as the reader reads it: "Column: value; Column: value"; any other unit as it is.
pub fn readable(unit: &Unit) -> String {
    if unit.header.is_empty() {
        return unit.text.clone();
    }
    let cells = |row: &str| -> Vec<String> { row.split('|').map(str::trim).filter(|c| !c.is_empty()).map(str::to_string).collect() };
    let (header, row) = (cells(&unit.header), cells(&unit.text));
    if header.len() != row.len() {
        return format!("{} {}", unit.header, unit.text);
    }
    header.iter().zip(&row).map(|(h, v)| format!("{h}: {v}")).collect::<Vec<_>>().join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restatement_is_caught_and_an_answer_is_not() {
        let cases = [
            ("Is NetworkManager a good choice for configuring a server's network?", "[1] NetworkManager is a good choice for configuring a server's network.", true),
            ("Will files I leave in /tmp survive a reboot?", "Files in /tmp survive a reboot. [1]", true),
            ("Can the canteen kiosk PCs still log in with just a password?", "[1] Yes.", true),
            ("What's the hotel cap in London?", "[1] The hotel cap in London is GBP 210.", false),
            ("How many days do I have to submit an expense claim?", "[1] 30 days.", false),
            ("Does VALID UNTIL stop a role logging in with certificate auth?", "[1] VALID UNTIL does not stop certificate logins.", false),
            ("Why is a umask of 0002 considered safe on Debian?", "[1] The passage requires that a umask of 0002 is considered safe on Debian.", true),
        ];
        for (q, reply, want) in cases {
            assert_eq!(restates(reply, q), want, "{reply}");
        }
    }

    #[test]
    fn a_table_row_is_read_with_its_header() {
        let row = Unit { text: "| London | GBP 65 | GBP 210 |".into(), header: "| City | Meals | Hotel cap |".into(), ..Unit::default() };
        assert_eq!(readable(&row), "City: London; Meals: GBP 65; Hotel cap: GBP 210");
        let sentence = Unit { text: "Claims are due within 30 days.".into(), ..Unit::default() };
        assert_eq!(readable(&sentence), "Claims are due within 30 days.");
    }
}
