//! Resolving a follow-up against the question before it, without a model: the follow-up's
//! reference is replaced by what it points at, so retrieval gets one question that keeps the
//! follow-up's own ask.
//!
//! - A pronoun ("How long are they kept?") takes the earlier question's topic, its last run of
//!   nouns with the determiner before it: "How long are the visitor logs kept?".
//! - A demonstrative on a noun ("what if I miss that deadline?") becomes "the deadline for" the
//!   topic, or the topic itself when it names that noun ("this policy" → "the travel policy").
//! - An ellipsis ("And in New York?", "What about Rotterdam?", "For contractors?") swaps its
//!   phrase into the earlier question: the phrase with the same preposition (not one that opens
//!   an action: "for deleting the invoices"), else the phrase with its head noun, else the name
//!   it replaces, else the object the earlier question ends with ("And staff records?" after
//!   "How long do we keep customer contracts?"), else it is added at the end; a what-if ("And
//!   what if I miss it?") is the follow-up with its own references resolved, and an action
//!   ("What about printing payslips at home?") a question of its own.
//! - A person pronoun ("Is she …?", "her deputy") takes the topic as the others do: after "Who
//!   is the data protection officer?" the officer is who "she" is.
//!
//! Imports `conversation::follow_up` (the follow-up detector) and `words` only.
//!
//! ```
//! use ragbox_core::conversation::resolve::resolve;
//! assert_eq!(resolve("How long are they kept?", "Who owns the visitor logs?").as_deref(), Some("How long are the visitor logs kept?"));
//! assert_eq!(resolve("And in New York?", "What's the hotel cap in London?").as_deref(), Some("What's the hotel cap in New York?"));
//! ```

use super::follow_up::{continues, refers_back, CueKind};
use crate::words::{is_preposition, is_stop, is_verb};

/// Connectives a follow-up opens with, dropped from the standalone question.
const OPENERS: &[&str] = &["and", "but", "so", "also", "then", "plus", "or"];

/// Determiners kept in front of a topic.
const DETERMINERS: &[&str] = &["the", "a", "an", "my", "our", "your", "their", "his", "her", "its"];

/// A word with its byte range in the text.
#[derive(Debug, Clone)]
struct Word<'a> {
    text: &'a str,
    lower: String,
    start: usize,
    end: usize,
}

fn words(text: &str) -> Vec<Word<'_>> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices().chain(std::iter::once((text.len(), ' '))) {
        let inside = c.is_alphanumeric() || matches!(c, '\'' | '’' | '-' | '£' | '$' | '€' | '%');
        match (start, inside) {
            (None, true) => start = Some(i),
            (Some(s), false) => {
                let w = text[s..i].trim_matches(['\'', '’', '-']);
                if !w.is_empty() {
                    let s = s + text[s..i].find(w).unwrap_or(0);
                    out.push(Word { text: w, lower: w.to_lowercase(), start: s, end: s + w.len() });
                }
                start = None;
            }
            _ => {}
        }
    }
    out
}

fn noun_like(w: &Word) -> bool {
    !is_stop(&w.lower) && !is_preposition(&w.lower) && !is_verb(&w.lower) && !w.lower.ends_with("'s")
}

/// A determiner that can open a topic ("its" points back itself).
fn is_determiner(w: &Word) -> bool {
    DETERMINERS.contains(&w.lower.as_str())
}

/// A past participle ("encrypted", "provided"): said of a noun, never one. Nouns in "-eed"
/// ("speed", "seed") and "hundred" are not.
fn is_participle(w: &Word) -> bool {
    w.lower.len() > 4 && w.lower.ends_with("ed") && !w.lower.ends_with("eed") && w.lower != "hundred"
}

/// `ws[k]` is a verb's -ing form with its object after it ("printing payslips", "getting rid",
/// "deleting the invoices"): an action, not a thing ("training", "parking for visitors").
fn is_gerund(ws: &[Word], k: usize) -> bool {
    let w = &ws[k];
    w.lower.len() > 4 && w.lower.ends_with("ing") && ws.get(k + 1).is_some_and(|next| !is_preposition(&next.lower))
}

/// The first word of the run of noun-like words that ends at `ws[k]`.
fn run_start(ws: &[Word], k: usize) -> usize {
    let mut first = k;
    while first > 0 && noun_like(&ws[first - 1]) {
        first -= 1;
    }
    first
}

/// The earlier question's topic: the words after its last determiner up to a preposition or
/// the end ("Who owns the visitor logs?" → "the visitor logs", "What is a legal hold?" → "a
/// legal hold"), taken leftwards over a preposition to the phrase it belongs to ("What's the
/// monthly limit on the corporate card?" → "the monthly limit on the corporate card": the limit
/// is what a later "it" means); with no determiner, its longest run of noun-like words ("How
/// much did we budget for phishing awareness training this year?" → "the phishing awareness
/// training"; the later one on a tie).
fn topic(before: &str) -> Option<String> {
    let ws = words(before);
    let determiner = |w: &Word| is_determiner(w) && w.lower != "its";
    if let Some(mut d) = ws.iter().rposition(determiner) {
        let mut run = ws[d + 1..].iter().take_while(|w| !is_preposition(&w.lower) && !is_stop(&w.lower)).count();
        // A participle after the nouns is said of them ("Is my work laptop encrypted?").
        while run > 1 && is_participle(&ws[d + run]) {
            run -= 1;
        }
        if run > 0 {
            let end = ws[d + run].end;
            // "<determiner> <nouns> <preposition>" right before: the phrase this one completes.
            while d >= 3 && is_preposition(&ws[d - 1].lower) && noun_like(&ws[d - 2]) {
                match run_start(&ws, d - 2).checked_sub(1) {
                    Some(k) if determiner(&ws[k]) => d = k,
                    _ => break,
                }
            }
            return Some(before[ws[d].start..end].to_string());
        }
    }
    let mut best: Option<(usize, usize)> = None;
    let mut i = 0;
    while i < ws.len() {
        if noun_like(&ws[i]) && i > 0 {
            let mut j = i;
            while j + 1 < ws.len() && noun_like(&ws[j + 1]) {
                j += 1;
            }
            if best.is_none_or(|(a, b)| j - i >= b - a) {
                best = Some((i, j));
            }
            i = j + 1;
        } else {
            i += 1;
        }
    }
    let (a, b) = best?;
    let from = if a > 0 && is_determiner(&ws[a - 1]) { a - 1 } else { a };
    let mut phrase = before[ws[from].start..ws[b].end].to_string();
    if from == a {
        phrase.insert_str(0, "the ");
    }
    Some(phrase)
}

/// Replaces the first whole-word occurrence of `what` in `text` by `with`.
fn replace_word(text: &str, what: &str, with: &str) -> Option<String> {
    let lower = text.to_lowercase();
    let what = what.to_lowercase();
    let mut from = 0;
    while let Some(at) = lower[from..].find(&what).map(|i| i + from) {
        let end = at + what.len();
        let bounded = |c: Option<char>| c.is_none_or(|c| !c.is_alphanumeric());
        if bounded(lower[..at].chars().next_back()) && bounded(lower[end..].chars().next()) {
            return Some(format!("{}{with}{}", &text[..at], &text[end..]));
        }
        from = end;
    }
    None
}

/// `text` as a question: first letter capital, one `?` at the end.
fn as_question(text: &str) -> String {
    let t = text.trim().trim_end_matches(['?', '.', '!', ' ']);
    let mut chars = t.chars();
    let first = chars.next().map(|c| c.to_uppercase().collect::<String>()).unwrap_or_default();
    format!("{first}{}?", chars.as_str())
}

/// The follow-up without its opening connective ("And", "But", "What about").
fn without_opener(question: &str) -> &str {
    let ws = words(question);
    let mut skip = 0;
    while ws.get(skip).is_some_and(|w| OPENERS.contains(&w.lower.as_str())) {
        skip += 1;
    }
    if ws.get(skip).is_some_and(|w| w.lower == "what" || w.lower == "how") && ws.get(skip + 1).is_some_and(|w| w.lower == "about") {
        skip += 2;
    }
    match ws.get(skip) {
        Some(w) if skip > 0 => &question[w.start..],
        Some(_) => question,
        None => "",
    }
}

/// `question` with its pronoun or demonstrative replaced by `before`'s topic.
fn resolve_reference(question: &str, before: &str) -> Option<String> {
    let topic = topic(before)?;
    let (kind, text) = match refers_back(question) {
        Some(cue) if matches!(cue.kind, CueKind::Pronoun | CueKind::Demonstrative) => (cue.kind, cue.text),
        // Inside a what-if the detector reads "miss that deadline" as a relative "that": a
        // demonstrative on a noun all the same once the question is known to refer back.
        _ => {
            let ws = words(question);
            let at = ws.windows(2).position(|p| matches!(p[0].lower.as_str(), "that" | "this" | "these" | "those") && noun_like(&p[1]))?;
            (CueKind::Demonstrative, question[ws[at].start..ws[at + 1].end].to_string())
        }
    };
    let cue = super::follow_up::FollowUpCue { kind, text };
    let cue_words = words(&cue.text);
    match cue.kind {
        CueKind::Pronoun => {
            let pronoun = cue_words.first()?.lower.clone();
            // "her" before a noun is a possessive ("her leave requests"), else an object ("ask
            // her", "ask her about it", "give her the form", "email her directly", "call her today").
            let qw = words(question);
            let adverb = |w: &str| w.ends_with("ly") || ["today", "tomorrow", "now", "again", "later", "first", "back", "too"].contains(&w);
            let possessive_her = pronoun == "her"
                && qw.iter().position(|w| w.lower == "her").and_then(|k| qw.get(k + 1)).is_some_and(|w| {
                    !is_stop(&w.lower) && !is_preposition(&w.lower) && !adverb(&w.lower)
                });
            let with = match pronoun.as_str() {
                "its" | "their" | "his" | "hers" => format!("{topic}'s"),
                "her" if possessive_her => format!("{topic}'s"),
                "this" | "that" | "these" | "those" | "it" | "they" | "them" | "he" | "she" | "him" | "her" => topic.clone(),
                "there" => format!("in {topic}"),
                _ => return None,
            };
            replace_word(question, &cue.text, &with)
        }
        CueKind::Demonstrative => {
            let noun = cue_words.get(1)?.lower.clone();
            let with = if topic.to_lowercase().split_whitespace().any(|w| w.trim_end_matches('s') == noun.trim_end_matches('s')) {
                topic.clone()
            } else {
                let of = topic.split_once(' ').filter(|(d, _)| DETERMINERS.contains(d)).map_or(topic.as_str(), |(_, rest)| rest);
                format!("the {} for {of}", &cue.text[cue_words[1].start..])
            };
            replace_word(question, &cue.text, &with)
        }
        _ => None,
    }
}

/// `before` with the ellipsis `phrase` swapped in.
fn swap_in(phrase: &str, before: &str) -> Option<String> {
    let pw = words(phrase);
    let head = pw.first()?;
    let bw = words(before);
    let body_end = before.trim_end().trim_end_matches(['?', '.', '!']).len();
    // An action ("What about printing restricted stuff at home?") is a question of its own.
    if is_gerund(&pw, 0) {
        return Some(as_question(&format!("What about {phrase}")));
    }
    // The noun run the earlier question ends with (its object), with the determiner before it:
    // "customer contracts" in "How long do we keep customer contracts?".
    // A name there (a place, a person) stays: "the meal allowance there" after "… in London?".
    let capital = |w: &Word| w.text.chars().next().is_some_and(char::is_uppercase);
    let end_object = bw.last().filter(|w| noun_like(w) && !is_participle(w) && w.end == body_end).and_then(|_| {
        let first = run_start(&bw, bw.len() - 1);
        if bw[first..].iter().any(capital) {
            return None;
        }
        Some(match first.checked_sub(1).map(|d| &bw[d]) {
            Some(d) if is_determiner(d) => d.start,
            _ => bw[first].start,
        })
    });
    if is_preposition(&head.lower) {
        // The earlier question's phrase with the same preposition runs to the next preposition or
        // the end; one that opens an action ("for getting rid of the e-mail") is no like phrase:
        // the noun phrase takes the place of the object the question ends with.
        let like = bw.iter().rposition(|w| w.lower == head.lower).filter(|&k| !(k + 1 < bw.len() && is_gerund(&bw, k + 1)));
        if like.is_none() {
            if let (Some(start), Some(object)) = (end_object, pw.get(1)) {
                return Some(as_question(&format!("{}{}", &before[..start], &phrase[object.start..])));
            }
        }
        if let Some(k) = like {
            let end = bw[k + 1..].iter().find(|w| is_preposition(&w.lower)).map_or(body_end, |w| w.start);
            let tail = if end < body_end { format!(" {}", before[end..body_end].trim()) } else { String::new() };
            return Some(as_question(&format!("{} {}{tail}", before[..bw[k].start].trim_end(), phrase)));
        }
        return Some(as_question(&format!("{} {phrase}", &before[..body_end])));
    }
    // A phrase of the same kind for its like: "And the resolution target?" after "What's the
    // first response target for a P4 request?" takes the place of the earlier question's phrase
    // with that head noun (its modifiers from the determiner on), keeping what follows it.
    let last = pw.last()?;
    if noun_like(last) {
        if let Some(k) = bw.iter().rposition(|w| w.lower == last.lower) {
            let first = run_start(&bw, k);
            let start = match (first.checked_sub(1).map(|d| &bw[d]), is_determiner(head)) {
                (Some(d), true) if is_determiner(d) => d.start,
                _ => bw[first].start,
            };
            return Some(as_question(&format!("{}{phrase}{}", &before[..start], &before[bw[k].end..body_end])));
        }
    }
    // A name for a name: "What about Rotterdam?" after "… in London?".
    if capital(head) {
        if let Some(k) = bw.iter().skip(1).rposition(|w| capital(w)).map(|k| k + 1) {
            let mut first = k;
            while first > 1 && capital(&bw[first - 1]) {
                first -= 1;
            }
            return Some(as_question(&format!("{}{phrase}{}", &before[..bw[first].start], &before[bw[k].end..body_end])));
        }
    }
    // A noun phrase for the object the earlier question ends with: "And proof-of-delivery
    // data?" after "How long do we keep customer contracts?".
    if let Some(start) = end_object {
        return Some(as_question(&format!("{}{phrase}", &before[..start])));
    }
    Some(as_question(&format!("{} for {phrase}", &before[..body_end])))
}

/// `question` with the earlier question's topic added, for a follow-up that names nothing it
/// points at ("What if there's nothing available under the cap?" → "… under the cap (the
/// hotel cap in London)?"): retrieval then has the conversation's subject.
fn about(question: &str, before: &str) -> String {
    match topic(before) {
        Some(t) if !question.to_lowercase().contains(&t.to_lowercase()) => {
            format!("{} ({t})?", question.trim_end().trim_end_matches(['?', '.', '!']))
        }
        _ => question.to_string(),
    }
}

/// The standalone form of the follow-up `question` given the question `before` it (its
/// standalone form), or `None` when its reference is of a kind this cannot resolve (talk about
/// the conversation itself, comparisons) or nothing in `before` can take its place.
pub fn resolve(question: &str, before: &str) -> Option<String> {
    let Some(cue) = refers_back(question) else {
        return continues(question).then(|| {
            let own = as_question(without_opener(question.trim()));
            resolve_reference(&own, before).unwrap_or_else(|| about(&own, before))
        });
    };
    let rest = without_opener(question.trim()).trim_end_matches(['?', '.', '!', ' ']);
    if rest.is_empty() {
        return None;
    }
    let first = words(rest).first()?.lower.clone();
    match cue.kind {
        CueKind::Ellipsis if first == "what" || first == "if" || first == "why" || first == "how" || first == "when" || first == "who" => {
            // A new question of its own ("what if I miss that deadline"): resolve what it points at.
            let own = as_question(rest);
            Some(resolve_reference(&own, before).unwrap_or_else(|| about(&own, before)))
        }
        CueKind::Ellipsis if words(rest).len() <= 6 => swap_in(rest, before),
        CueKind::Pronoun | CueKind::Demonstrative => resolve_reference(&as_question(rest), before),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pronouns_take_the_earlier_questions_topic() {
        assert_eq!(resolve("Can it be raised?", "What's the monthly limit on the corporate card?").as_deref(), Some("Can the monthly limit on the corporate card be raised?"));
        assert_eq!(
            resolve("Does it cover people without a company email?", "How much did we budget for phishing awareness training this year?").as_deref(),
            Some("Does the phishing awareness training cover people without a company email?")
        );
        assert_eq!(resolve("Who approves it?", "How many days do I have to submit an expense claim?").as_deref(), Some("Who approves an expense claim?"));
        assert_eq!(resolve("And how long are they kept?", "Who owns the visitor logs?").as_deref(), Some("How long are the visitor logs kept?"));
    }

    #[test]
    fn a_person_pronoun_takes_the_person_asked_about() {
        assert_eq!(resolve("Is she also the records officer?", "Who is the data protection officer?").as_deref(), Some("Is the data protection officer also the records officer?"));
        assert_eq!(resolve("How do I reach her?", "Who is the data protection officer?").as_deref(), Some("How do I reach the data protection officer?"));
        assert_eq!(resolve("Who signs her leave requests?", "Who is the data protection officer?").as_deref(), Some("Who signs the data protection officer's leave requests?"));
        assert_eq!(resolve("Can I call her today?", "Who is the data protection officer?").as_deref(), Some("Can I call the data protection officer today?"));
    }

    #[test]
    fn ellipses_swap_their_phrase_in() {
        assert_eq!(
            resolve("And for contractors?", "What is the travel insurance limit for staff?").as_deref(),
            Some("What is the travel insurance limit for contractors?")
        );
        assert_eq!(resolve("What about Rotterdam?", "What's the hotel cap in London?").as_deref(), Some("What's the hotel cap in Rotterdam?"));
        assert_eq!(
            resolve("And the resolution target?", "What's the first response target for a P4 request?").as_deref(),
            Some("What's the resolution target for a P4 request?")
        );
        assert_eq!(resolve("And the meal cap?", "What's the hotel cap in London?").as_deref(), Some("What's the meal cap in London?"));
        assert_eq!(
            resolve("And what if I miss that deadline?", "How many days do I have to submit an expense claim?").as_deref(),
            Some("What if I miss the deadline for expense claim?")
        );
    }

    #[test]
    fn an_ellipsis_takes_the_place_of_the_object_the_question_ends_with() {
        assert_eq!(resolve("And the CCTV footage?", "Who owns the visitor logs?").as_deref(), Some("Who owns the CCTV footage?"));
        assert_eq!(resolve("And staff records?", "How long do we keep customer contracts?").as_deref(), Some("How long do we keep staff records?"));
        // A phrase opening an action is no like phrase for a preposition's noun phrase.
        assert_eq!(
            resolve("And for staff records?", "Who is responsible for deleting the old invoices?").as_deref(),
            Some("Who is responsible for deleting staff records?")
        );
        // A name the earlier question ends with is kept: the phrase is added.
        let there = resolve("And what about the meal allowance there?", "What is the maximum hotel cost per night in London?").unwrap();
        assert!(there.contains("London"), "{there}");
        // An earlier question that ends in a clause keeps the phrase added.
        assert_eq!(resolve("And lunch?", "How much is cut from my per diem if breakfast is provided?").as_deref(), Some("How much is cut from my per diem if breakfast is provided for lunch?"));
    }

    #[test]
    fn an_action_is_a_question_of_its_own_and_a_participle_no_topic() {
        assert_eq!(resolve("What about printing payslips at home?", "Can I share org charts outside the company?").as_deref(), Some("What about printing payslips at home?"));
        assert_eq!(resolve("What if it gets lost?", "Is my work phone encrypted?").as_deref(), Some("What if my work phone gets lost?"));
        assert_eq!(resolve("Can it be raised?", "What is the upload speed?").as_deref(), Some("Can the upload speed be raised?"));
    }

    #[test]
    fn a_what_if_that_names_nothing_gets_the_earlier_topic() {
        assert_eq!(
            resolve("What if there's nothing available under the cap?", "What is the hotel cap in London?").as_deref(),
            Some("What if there's nothing available under the cap (the hotel cap)?")
        );
        assert_eq!(resolve("Does it override the retention periods?", "What is a legal hold?").as_deref(), Some("Does a legal hold override the retention periods?"));
    }

    #[test]
    fn talk_about_the_conversation_is_left_to_the_model() {
        assert_eq!(resolve("What did you say the deadline was?", "Who approves expenses?"), None);
        assert_eq!(resolve("What is the travel insurance limit for staff?", "Who approves expenses?"), None);
    }
}
