//! Session memory: which earlier turns a follow-up needs ([`relevant_turns`]) and how it becomes
//! one standalone question for retrieval: the rewrite prompt ([`rewrite_messages`]), the
//! cleaning of the generator's rewrite ([`clean_rewrite`], [`made_up_words`]) and the
//! deterministic fallback ([`fallback_rewrite`]). Whether a question refers back at all is
//! [`follow_up`](super::follow_up)'s. It neither stores nor generates: the caller loads the
//! session's turns from the store and runs the generator. May import `types`, `error`,
//! `generate` (for [`Message`]), `words` and `conversation::follow_up`.

use std::collections::HashSet;

use super::follow_up::{continues, refers_back};
use crate::words::content_words;
use crate::generate::Message;

/// Answers longer than this (in characters) are cut in the rewrite prompt.
const ANSWER_CHARS: usize = 300;

/// One earlier turn of the session, as the rewrite needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PriorTurn<'a> {
    /// The question as asked.
    pub question: &'a str,
    /// The question as retrieval saw it (rewritten when it referred back).
    pub standalone: &'a str,
    /// The answer given.
    pub answer: &'a str,
}


/// Indices (into `prior`, oldest first) of the turns a follow-up needs: always the latest turn,
/// plus at most `max - 1` earlier ones that share content words with the follow-up (a word in
/// the turn's question counts twice, one only in its answer once), most overlapping first (the
/// later on ties), returned in chronological order. Empty when `prior` is empty or `max` is 0.
pub fn relevant_turns(question: &str, prior: &[PriorTurn], max: usize) -> Vec<usize> {
    let Some(latest) = prior.len().checked_sub(1) else { return Vec::new() };
    if max == 0 {
        return Vec::new();
    }
    let words = content_words(question);
    let mut scored: Vec<(usize, usize)> = prior[..latest]
        .iter()
        .enumerate()
        .filter_map(|(k, turn)| {
            let mut asked = content_words(turn.standalone);
            asked.extend(content_words(turn.question));
            let answered = content_words(turn.answer);
            let score = words.iter().map(|w| if asked.contains(w) { 2 } else { usize::from(answered.contains(w)) }).sum::<usize>();
            (score > 0).then_some((k, score))
        })
        .collect();
    scored.sort_by(|a, b| b.1.cmp(&a.1).then(b.0.cmp(&a.0)));
    let mut picked: Vec<usize> = scored.into_iter().take(max - 1).map(|(k, _)| k).collect();
    picked.push(latest);
    picked.sort_unstable();
    picked
}

/// `answer` on one line without citation markers, cut to about [`ANSWER_CHARS`] characters.
fn brief_answer(answer: &str) -> String {
    let mut out = String::with_capacity(answer.len().min(ANSWER_CHARS + 8));
    let mut rest = answer;
    // Drop "[1]", "[2, 3]" markers: they mean nothing without the sources.
    while let Some(open) = rest.find('[') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find(']') {
            Some(close) if after[..close].chars().all(|c| c.is_ascii_digit() || c == ',' || c == ' ') && close > 0 => {
                rest = &after[close + 1..];
            }
            _ => {
                out.push('[');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    let flat = out.split_whitespace().collect::<Vec<_>>().join(" ").replace(" .", ".").replace(" ,", ",");
    if flat.chars().count() <= ANSWER_CHARS {
        return flat;
    }
    let cut: String = flat.chars().take(ANSWER_CHARS).collect();
    let cut = match cut.rfind(' ') {
        Some(sp) if sp > ANSWER_CHARS / 2 => &cut[..sp],
        _ => cut.as_str(),
    };
    format!("{}…", cut.trim_end_matches([',', ';', ':']))
}

const REWRITE_SYSTEM: &str = "You rewrite the last question of a conversation so that it can be understood on its own, \
without the conversation. Replace every reference to the conversation (it, they, that, the other one, the same, \
what about ...) with what it refers to, using the earlier questions and answers. Keep the asker's wording and intent \
otherwise. Do not answer the question and do not add facts that are not in the conversation. Reply with the rewritten \
question only, on one line.";

fn rewrite_prompt(question: &str, turns: &[PriorTurn]) -> String {
    let mut s = String::from("Conversation:\n");
    for t in turns {
        let asked = if t.standalone.trim().is_empty() { t.question } else { t.standalone };
        s.push_str(&format!("Q: {}\nA: {}\n", asked.trim(), brief_answer(t.answer)));
    }
    s.push_str(&format!("\nFollow-up question: {}\n\nRewritten question:", question.trim()));
    s
}

/// Messages asking the generator to rewrite `question` as one standalone question, given the
/// turns it refers back to (oldest first; answers cut to about 300 characters, citation markers
/// removed). One worked example precedes the real request; the reply is the rewritten question
/// alone (pass it through [`clean_rewrite`]).
pub fn rewrite_messages(question: &str, turns: &[PriorTurn]) -> Vec<Message> {
    let example = [PriorTurn {
        question: "What is the travel insurance limit for staff?",
        standalone: "What is the travel insurance limit for staff?",
        answer: "Staff are covered up to £5,000 per trip [1].",
    }];
    vec![
        Message::system(REWRITE_SYSTEM),
        Message::user(rewrite_prompt("And for contractors?", &example)),
        Message::assistant("What is the travel insurance limit for contractors?"),
        Message::user(rewrite_prompt(question, turns)),
    ]
}

/// Cleans a generator's rewrite: drops a reasoning block (`<think>…</think>`), keeps the first
/// non-empty line, strips list marks, quotes and prefixes such as "Rewritten question:".
/// `None` when nothing is left, when it is longer than 3x the follow-up (at least 200
/// characters), when it is more than one question ("What is the card's limit? Can it be
/// raised?": the reference is left where it was), or, for a follow-up that refers back or a
/// what-if that continues the conversation, when it adds no word (the reference is still
/// unresolved) or drops the follow-up's own words (its intent is lost: "What if there's nothing
/// available under the cap?" rewritten as "Where do I book hotels for a business trip?").
pub fn clean_rewrite(raw: &str, question: &str) -> Option<String> {
    let body = raw.rsplit_once("</think>").map_or(raw, |(_, after)| after);
    let line = body.lines().map(str::trim).find(|l| !l.is_empty())?;
    let mut s = line;
    loop {
        let before = s;
        s = s.trim_start_matches(['-', '*', '>', '#', ' ']).trim();
        s = s.trim_matches(['"', '\'', '“', '”', '‘', '’', '`', '*', ' ']);
        let lower = s.to_lowercase();
        for prefix in [
            "rewritten question:",
            "standalone question:",
            "rewritten:",
            "standalone:",
            "question:",
            "follow-up question:",
            "q:",
        ] {
            if lower.starts_with(prefix) {
                s = s[prefix.len()..].trim();
                break;
            }
        }
        if s == before {
            break;
        }
    }
    if s.is_empty() {
        return None;
    }
    let limit = (3 * question.chars().count()).max(200);
    if s.chars().count() > limit {
        return None;
    }
    if s.matches('?').count() > question.matches('?').count().max(1) {
        return None;
    }
    let cue = refers_back(question).map(|c| c.text).or_else(|| continues(question).then(String::new));
    if let Some(cue) = cue {
        let asked = content_words(question);
        let written = content_words(s);
        let own: HashSet<String> = asked.difference(&content_words(&cue)).cloned().collect();
        let adds = written.iter().any(|w| !asked.contains(w));
        // A rewrite that drops the follow-up's own ask ("And what if I miss that deadline?"
        // rewritten as the earlier question) lost its intent: at most one of three or more of
        // its words may go (to a synonym).
        let lost = own.iter().filter(|w| !written.contains(*w)).count();
        if !adds || lost > usize::from(own.len() >= 3) {
            return None;
        }
    }
    Some(s.to_string())
}

/// Content words of `rewrite` found neither in `question` nor in `turns` (their questions,
/// standalone forms and answers): what a rewrite made up. The 0.5B model, shown one worked
/// example, wrote "What is the travel insurance limit for dinner?" after a question on meal
/// allowances: the example's subject, not the conversation's.
pub fn made_up_words(rewrite: &str, question: &str, turns: &[PriorTurn]) -> Vec<String> {
    let mut seen = content_words(question);
    for t in turns {
        seen.extend(content_words(t.question));
        seen.extend(content_words(t.standalone));
        seen.extend(content_words(t.answer));
    }
    let mut made: Vec<String> = content_words(rewrite).into_iter().filter(|w| !seen.contains(w)).collect();
    made.sort();
    made
}

/// The deterministic rewrite when no generator is available or its rewrite is unusable: the
/// standalone form of the latest of `turns` followed by the follow-up, e.g. "What is the travel
/// insurance limit? What about the other one?". The follow-up alone when `turns` is empty.
pub fn fallback_rewrite(question: &str, turns: &[PriorTurn]) -> String {
    let question = question.trim();
    let Some(last) = turns.last() else { return question.to_string() };
    let before = if last.standalone.trim().is_empty() { last.question } else { last.standalone }.trim();
    if before.is_empty() {
        return question.to_string();
    }
    if before.ends_with(['?', '.', '!']) {
        format!("{before} {question}")
    } else {
        format!("{before}? {question}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn<'a>(question: &'a str, answer: &'a str) -> PriorTurn<'a> {
        PriorTurn { question, standalone: question, answer }
    }

    #[test]
    fn relevant_turns_keep_the_latest_and_the_overlapping() {
        let prior = [
            turn("Which client did we onboard in March?", "Northwind Ltd was onboarded in March [2]."),
            turn("What is the travel insurance limit?", "£5,000 per trip."),
            turn("How many days of annual leave do staff get?", "25 days plus bank holidays."),
            turn("Who approves expenses?", "Line managers."),
        ];
        // Only the latest when nothing else overlaps.
        assert_eq!(relevant_turns("Who approves it?", &prior, 3), [3]);
        // The earlier turn about the client, then the latest, in order.
        assert_eq!(relevant_turns("The same client as last week — what did we agree?", &prior, 3), [0, 3]);
        // Most overlapping first, capped by max.
        let q = "Does the travel insurance limit cover annual leave trips?";
        assert_eq!(relevant_turns(q, &prior, 3), [1, 2, 3]);
        assert_eq!(relevant_turns(q, &prior, 2), [1, 3]);
        assert_eq!(relevant_turns(q, &prior, 1), [3]);
        assert!(relevant_turns(q, &prior, 0).is_empty());
        assert!(relevant_turns(q, &[], 3).is_empty());
        // Plurals match singulars.
        let prior = [turn("Which policies cover contractors?", "Two."), turn("Why?", "Because.")];
        assert_eq!(relevant_turns("And the policy for interns?", &prior, 2), [0, 1]);
    }

    #[test]
    fn rewrite_messages_show_the_turns_and_ask_for_the_question_only() {
        let long = "word ".repeat(200);
        let turns = [PriorTurn {
            question: "And the other one?",
            standalone: "What is the travel insurance limit for contractors?",
            answer: &long,
        }];
        let m = rewrite_messages("Who approves it?", &turns);
        assert_eq!(m.len(), 4);
        assert_eq!(m[0].role, crate::generate::Role::System);
        assert!(m[0].content.contains("rewritten question only"));
        let last = &m[3].content;
        assert!(last.contains("Q: What is the travel insurance limit for contractors?"), "{last}");
        assert!(last.contains("Follow-up question: Who approves it?"));
        assert!(last.len() < 500, "the answer is cut: {}", last.len());
        assert!(last.contains('…'));
        assert_eq!(brief_answer("Up to £5,000 [1] per trip [2, 3]. See [the annex]."), "Up to £5,000 per trip. See [the annex].");
    }

    #[test]
    fn clean_rewrite_takes_the_question_and_refuses_junk() {
        let q = "What about the other one?";
        assert_eq!(
            clean_rewrite("Rewritten question: \"What is the limit for the contractor policy?\"\nExplanation: ...", q).as_deref(),
            Some("What is the limit for the contractor policy?")
        );
        assert_eq!(
            clean_rewrite("<think>they mean contractors</think>\n\n  What is the limit for contractors?", q).as_deref(),
            Some("What is the limit for contractors?")
        );
        assert_eq!(clean_rewrite("**Standalone question:** Who approves travel?", "Who approves it?").as_deref(), Some("Who approves travel?"));
        assert_eq!(clean_rewrite("   \n  ", q), None);
        assert_eq!(clean_rewrite("\"\"", q), None);
        assert_eq!(clean_rewrite(&"very long rewrite ".repeat(20), q), None);
        // Repeating the follow-up leaves the reference unresolved.
        assert_eq!(clean_rewrite("What about the other one?", q), None);
        assert_eq!(clean_rewrite("Who approves it, then?", "Who approves it?"), None);
        // The earlier question again: the follow-up's own ask is lost.
        let what_if = "And what if I miss that deadline?";
        assert_eq!(clean_rewrite("How many days do I have to submit an expense claim?", what_if), None);
        assert!(clean_rewrite("What happens if I miss the expense claim deadline?", what_if).is_some());
        // A what-if that continues the conversation keeps its own ask too.
        let continuing = "What if there's nothing available under the cap?";
        assert_eq!(clean_rewrite("Where do I book hotels for a business trip?", continuing), None);
        assert!(clean_rewrite("What if there's no hotel available under the London hotel cap?", continuing).is_some());
        // Two questions leave the reference where it was.
        assert_eq!(clean_rewrite("What is the monthly limit on the corporate card? Can it be raised?", "Can it be raised?"), None);
        assert!(clean_rewrite("Can the corporate card's monthly limit be raised?", "Can it be raised?").is_some());
        // A self-contained question may come back unchanged.
        let s = "What is the travel insurance limit for staff?";
        assert_eq!(clean_rewrite(s, s).as_deref(), Some(s));
    }

    #[test]
    fn fallback_joins_the_latest_question_and_the_follow_up() {
        let turns = [
            turn("Who approves expenses?", "Managers."),
            PriorTurn { question: "And the limit?", standalone: "What is the travel insurance limit", answer: "£5,000." },
        ];
        assert_eq!(
            fallback_rewrite("What about the other one?", &turns),
            "What is the travel insurance limit? What about the other one?"
        );
        assert_eq!(fallback_rewrite("Why?", &turns[..1]), "Who approves expenses? Why?");
        assert_eq!(fallback_rewrite(" Why? ", &[]), "Why?");
    }
}
