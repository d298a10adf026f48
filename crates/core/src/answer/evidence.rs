//! Evidence first: the passage sentences that decide a question, and the decision whether they
//! state its answer.
//!
//! Imports `answer::focus` (units and the scorer), `answer::quote` (a table row as a reader reads
//! it), `words` (content words) and `error`. No generator: the decision is made before any is asked.
//!
//! Every unit (sentence, list item, table row with its header) of the passages given is scored
//! against the question by the cross-encoder, whose logit means the same on every corpus. The
//! unit that scores best is the evidence (a passage's own question gives way to the unit after
//! it), with what it needs to be read on its own: a list item its lead-in, a lead-in the items it
//! introduces, a "what should I do" question the steps of its list.
//!
//! Then [`decide`] weighs what the evidence says against what the question asks:
//!
//! * **the cross-encoder's logit** on the evidence unit;
//! * **the question's specific terms** (named sites, systems, people, products, versions, years:
//!   capitalised words past the first, words with digits or code punctuation, quoted words) that
//!   are in neither the evidence unit nor its section heading or document title, and those in no
//!   passage at all: a near miss swaps one of them for a thing the documents never name;
//! * **the kind of answer asked for** ([`Asks`]): "when" wants a date or a time, "how many" a
//!   number, "who" a name or a role the question does not already hold, a phone number digits.
//!
//! The signals are combined by logistic regression ([`WEIGHTS`], fitted on the dev halves of the
//! evaluation sets, near misses included; docs/EVAL.md says how): the probability that the
//! evidence states the answer. Below [`ANSWERED_FLOOR`] the outcome is
//! [`AnswerOutcome::DoesNotSay`]: the answer says what the documents do cover, and what they do not
//! give, with the closest passages.
//!
//! ```
//! use ragbox_core::answer::evidence::{asks, specific_terms, Asks};
//! assert_eq!(asks("When does the Antwerp Saturday shift start?"), Asks::Date);
//! assert_eq!(asks("Can I fly business class to Singapore?"), Asks::YesNo);
//! assert_eq!(specific_terms("What's the hotel cap in Paris for 2025?"), ["paris", "2025"]);
//! ```

use serde::Serialize;

use super::focus::{answer_to, ranked, FocusScorer};
use super::segment::{units, Unit};
use crate::words::content_words;
use super::quote::readable;
use crate::error::Result;

/// What the decision found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AnswerOutcome {
    /// The evidence states the answer.
    Answered,
    /// The passages are about the question's subject but do not give what it asks.
    DoesNotSay,
    /// Nothing relevant: retrieval's refusal floor.
    NoGoodSource,
}

impl AnswerOutcome {
    /// What a reader is shown as the outcome's heading.
    pub fn describe(self) -> &'static str {
        match self {
            AnswerOutcome::Answered => "answered",
            AnswerOutcome::DoesNotSay => "the documents do not say",
            AnswerOutcome::NoGoodSource => "no good source",
        }
    }
}

/// Who writes an answer when the tenant has the cross-encoder (`answer.reader`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reader {
    /// The evidence, verbatim and cited, after the answerability decision.
    #[default]
    Evidence,
    /// The generator writes from the focused sentences; a reply that is no answer (declined, no
    /// words, only the question restated, or supported by no passage it cites) gives way to the
    /// evidence-first answer.
    Generate,
}

impl std::str::FromStr for Reader {
    type Err = crate::error::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "evidence" => Ok(Reader::Evidence),
            "generate" => Ok(Reader::Generate),
            other => Err(crate::error::Error::Invalid(format!("unknown reader `{other}`; use evidence or generate"))),
        }
    }
}

/// The kind of answer a question asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Asks {
    /// "Can I …?", "Is it …?": a rule that says yes or no.
    YesNo,
    /// "When …?", "What date …?", "Which year …?".
    Date,
    /// "How many …?", "How much …?", "How long …?", "What percentage …?".
    Number,
    /// "Who …?", "Which company …?".
    Name,
    /// A phone number, an e-mail address, an extension.
    Contact,
    /// "What should I do if …?", "How do I …?": steps.
    Steps,
    /// Anything else.
    Other,
}

/// One scored unit of a passage.
#[derive(Debug, Clone, Serialize)]
pub struct EvidenceUnit {
    /// The citation id of its passage.
    pub passage: usize,
    /// Its index among the passage's units.
    #[serde(skip)]
    pub index: usize,
    /// The unit as a reader reads it (a table row as "Column: value; …").
    pub text: String,
    /// The cross-encoder's logit for (question, unit).
    pub score: f32,
    /// The unit itself.
    #[serde(skip)]
    pub unit: Unit,
}

/// The signals the decision weighs (`--explain`, `--json`).
#[derive(Debug, Clone, Serialize)]
pub struct Signals {
    /// The cross-encoder's logit on the evidence unit.
    pub best_logit: f32,
    /// The question's specific terms.
    pub terms: Vec<String>,
    /// Of those, the ones in neither the evidence unit nor its heading or title.
    pub missing: Vec<String>,
    /// Of those, the ones in no passage given.
    pub missing_everywhere: Vec<String>,
    /// The kind of answer the question asks for.
    pub asks: Asks,
    /// Whether that kind of answer is in the evidence (always true for yes/no, steps, other).
    pub kind_present: bool,
    /// The share of the question's content words (stemmed, stop words aside) in neither the
    /// evidence nor its heading.
    pub uncovered: f32,
}

impl Signals {
    /// The feature vector [`WEIGHTS`] applies to (bias last).
    pub fn features(&self) -> [f32; FEATURES] {
        let n = self.terms.len().max(1) as f32;
        [
            self.best_logit.clamp(-12.0, 12.0),
            self.missing.len() as f32 / n,
            (!self.missing_everywhere.is_empty()) as u8 as f32,
            (!self.kind_present) as u8 as f32,
            self.uncovered,
            1.0,
        ]
    }
}

/// How many features [`Signals::features`] gives.
pub const FEATURES: usize = 6;

/// The logistic regression's weights over [`Signals::features`]: logit, share of specific terms
/// missing from the evidence, a term missing from every passage, the asked kind of answer
/// absent, share of content words uncovered, bias. Fitted by `scripts/eval/qa/fit-answerability.py
/// --shown-only` on the dev halves of the four QA sets, near misses included (positives: the
/// answerable questions whose evidence was quoted; docs/EVAL.md, "Evidence first").
pub const WEIGHTS: [f32; FEATURES] = [0.382, -0.611, -0.680, -0.194, 0.434, -0.966];

/// Below this probability that the evidence states the answer, the outcome is
/// [`AnswerOutcome::DoesNotSay`] (chosen on the dev halves: docs/EVAL.md, "Answerability").
pub const ANSWERED_FLOOR: f32 = 0.5;

/// The decision and what it rests on.
#[derive(Debug, Clone, Serialize)]
pub struct Decision {
    /// [`AnswerOutcome::Answered`] or [`AnswerOutcome::DoesNotSay`] (a refused retrieval never reaches it).
    pub outcome: AnswerOutcome,
    /// The probability that the evidence states the answer.
    pub score: f32,
    /// The floor it was compared with.
    pub floor: f32,
    /// What it weighed.
    pub signals: Signals,
    /// The evidence: the best unit and what it needs to be read on its own, in passage order.
    pub evidence: Vec<EvidenceUnit>,
    /// The units that scored best, best first, at most [`RANKED`] (`--explain`; a selection rule
    /// can be tried on a run's rows).
    pub ranked: Vec<EvidenceUnit>,
    /// Milliseconds: scoring every unit and deciding.
    pub ms: f64,
}

/// Words that open a yes/no question.
const YES_NO_OPENERS: &[&str] = &[
    "can", "could", "may", "might", "is", "are", "am", "was", "were", "do", "does", "did", "should", "must", "will", "would",
    "shall", "has", "have", "had", "isn't", "aren't", "doesn't", "don't", "can't", "won't", "shouldn't",
];

/// The kind of answer `question` asks for, from its wording.
pub fn asks(question: &str) -> Asks {
    let q = question.to_lowercase();
    let q = q.trim_start_matches(|c: char| !c.is_alphanumeric());
    let words: Vec<&str> = q.split(|c: char| !(c.is_alphanumeric() || c == '\'')).filter(|w| !w.is_empty()).collect();
    let has = |phrase: &str| q.contains(phrase);
    let first = words.first().copied().unwrap_or("");
    if has("phone") || has("telephone") || has("e-mail address") || has("email address") || has("extension number") || has("hotline") {
        return Asks::Contact;
    }
    if first == "when" || has("what date") || has("which date") || has("what year") || has("which year") || has("what time") || has("by when") || has("what day") || has("which day") || has("which month") || has("what month") {
        return Asks::Date;
    }
    if has("how many") || has("how much") || has("how long") || has("how often") || has("how big") || has("how large") || has("how old") || has("how far") || has("what percentage") || has("how fast") {
        return Asks::Number;
    }
    if first == "who" || first == "whom" || first == "whose" || has("which company") || has("which vendor") || has("which supplier") || has("which person") || has("which team") || has("who ") || has("what company") || has("which firm") || has("what is the name") || has("what's the name") {
        return Asks::Name;
    }
    if has("what should i do") || has("what do i do") || has("what should we do") || has("what are the steps") || first == "how" && words.get(1).is_some_and(|w| matches!(*w, "do" | "can" | "should" | "to")) {
        return Asks::Steps;
    }
    if YES_NO_OPENERS.contains(&first) {
        return Asks::YesNo;
    }
    Asks::Other
}

/// Question words and openers that are capitalised only because a sentence starts with them or
/// because they are the asker.
const NOT_SPECIFIC: &[&str] = &["i", "i'm", "i've", "i'd", "ok", "okay", "hi", "please"];

/// The question's specific terms, lower-cased, in order: capitalised words past the first word
/// (names of sites, systems, people, products), words with digits (years, versions, figures) or
/// code punctuation (`pg_dump`, `/etc/fstab`, `--force`, `os.path`), and words in quotes.
pub fn specific_terms(question: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut push = |w: &str| {
        let w = w.to_lowercase();
        if !w.is_empty() && !NOT_SPECIFIC.contains(&w.as_str()) && !out.contains(&w) {
            out.push(w);
        }
    };
    // Quoted words first-class: "what does 'VACUUM FULL' lock".
    let mut quoted = String::new();
    let mut inside = false;
    for c in question.chars() {
        match c {
            '"' | '“' | '”' | '`' => {
                if inside && !quoted.trim().is_empty() {
                    quoted.split_whitespace().for_each(|w| push(trim_word(w)));
                }
                quoted.clear();
                inside = !inside;
            }
            _ if inside => quoted.push(c),
            _ => {}
        }
    }
    let tokens: Vec<&str> = question.split_whitespace().collect();
    for (i, raw) in tokens.iter().enumerate() {
        let w = trim_word(raw);
        let w = w.strip_suffix("'s").or_else(|| w.strip_suffix("’s")).unwrap_or(w);
        if w.is_empty() {
            continue;
        }
        let digits = w.chars().any(|c| c.is_ascii_digit());
        let code = w.chars().any(|c| matches!(c, '_' | '/' | '.' | ':' | '=' | '(' | '<' | '>')) || w.starts_with('-') || w.starts_with('$');
        let after_sentence_start = i == 0 || tokens[i - 1].ends_with(['.', '?', '!', ':']);
        let capital = w.chars().next().is_some_and(char::is_uppercase) && !after_sentence_start;
        let inner_capital = w.chars().skip(1).any(char::is_uppercase) && w.chars().any(char::is_lowercase);
        if digits || code || capital || inner_capital {
            push(w);
        }
    }
    out
}

/// A word without the punctuation around it ("(Windows)," → "Windows"); inner punctuation stays.
fn trim_word(w: &str) -> &str {
    w.trim_matches(|c: char| matches!(c, ',' | '?' | '!' | ';' | '(' | ')' | '"' | '\'' | '“' | '”' | '‘' | '’' | '`' | '[' | ']' | '{' | '}'))
        .trim_end_matches('.')
        .trim_end_matches(':')
}

/// Whether `text` (lower-cased) holds `term`: as a whole word, or as a word's start when the
/// term has five letters or more ("Rotterdam" in "Rotterdam's", "backup" in "backups").
fn holds_term(text: &str, term: &str) -> bool {
    let mut from = 0;
    while let Some(at) = text[from..].find(term) {
        let start = from + at;
        let end = start + term.len();
        let before = text[..start].chars().next_back().is_none_or(|c| !c.is_alphanumeric());
        let after = text[end..].chars().next().is_none_or(|c| !c.is_alphanumeric());
        if before && (after || term.chars().count() >= 5) {
            return true;
        }
        from = start + text[start..].chars().next().map_or(1, char::len_utf8);
    }
    false
}

const MONTHS: &[&str] = &[
    "january", "february", "march", "april", "may", "june", "july", "august", "september", "october", "november", "december", "jan", "feb", "mar", "apr",
    "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec",
];
const DAYS: &[&str] = &["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday", "weekday", "weekend", "weekends", "weekdays"];
const TIME_WORDS: &[&str] = &[
    "daily", "weekly", "monthly", "quarterly", "annually", "yearly", "year", "years", "month", "months", "week", "weeks", "day", "days", "hour",
    "hours", "minute", "minutes", "before", "after", "until", "within", "immediately", "noon", "midnight", "morning", "evening", "night",
    "today", "tomorrow", "once", "during", "since", "later", "earlier", "first", "last", "next", "every", "am", "pm", "o'clock", "deadline",
    "release", "released", "version",
];
const NUMBER_WORDS: &[&str] = &[
    "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty", "thirty", "forty",
    "fifty", "hundred", "thousand", "million", "dozen", "once", "twice", "half", "double", "single", "no", "none", "unlimited", "all", "every",
    "several", "few", "many",
];
const ROLE_WORDS: &[&str] = &[
    "manager", "officer", "team", "department", "head", "director", "desk", "committee", "lead", "owner", "administrator", "admin", "user",
    "superuser", "board", "staff", "employee", "employees", "hr", "finance", "it", "security", "controller", "warden", "wardens", "supervisor",
    "you", "author", "authors", "maintainer", "maintainers", "developer", "developers", "company", "vendor", "supplier", "provider", "root",
    "owner", "group", "person", "someone", "anyone", "nobody", "everyone", "role", "roles", "server", "client", "process", "kernel", "system",
];

fn words_of(text: &str) -> Vec<String> {
    text.to_lowercase().split(|c: char| !(c.is_alphanumeric() || c == '\'')).filter(|w| !w.is_empty()).map(str::to_string).collect()
}

/// Whether `evidence` holds the kind of answer `asks` wants (`question` says which words are
/// not news: a "who" answer must name someone the question does not).
pub fn kind_present(asks: Asks, question: &str, evidence: &str) -> bool {
    let words = words_of(evidence);
    let digit = evidence.chars().any(|c| c.is_ascii_digit());
    match asks {
        Asks::YesNo | Asks::Steps | Asks::Other => true,
        Asks::Date => digit || words.iter().any(|w| MONTHS.contains(&w.as_str()) || DAYS.contains(&w.as_str()) || TIME_WORDS.contains(&w.as_str())),
        Asks::Number => digit || words.iter().any(|w| NUMBER_WORDS.contains(&w.as_str())),
        Asks::Contact => {
            evidence.contains('@') || evidence.contains("://") || evidence.chars().filter(|c| c.is_ascii_digit()).count() >= 3
        }
        Asks::Name => {
            let asked = words_of(question);
            let tokens: Vec<&str> = evidence.split_whitespace().collect();
            let new_name = tokens.iter().enumerate().any(|(i, t)| {
                let w = trim_word(t);
                let starts = i == 0 || tokens[i - 1].ends_with(['.', '?', '!', ':', ';']);
                w.chars().next().is_some_and(char::is_uppercase) && !starts && !asked.contains(&w.to_lowercase())
            });
            new_name || words.iter().any(|w| ROLE_WORDS.contains(&w.as_str()) && !asked.contains(w))
        }
    }
}

/// A passage given: its citation id, its text, and the heading and title its units stand under.
pub struct Passage<'a> {
    /// Citation id.
    pub id: usize,
    /// The passage's text.
    pub text: &'a str,
    /// Its section path and document title, one string.
    pub heading: String,
    /// What the cross-encoder reads before each of its units: the passage's own section (its
    /// last heading), or its document's title; empty for none.
    pub context: String,
}

/// Whether a unit introduces what follows ("You must:").
fn leads_in(unit: &Unit) -> bool {
    unit.text.trim_end().ends_with(':')
}

/// The evidence around the best unit `at` of `units`: its lead-in when it is a list item, the
/// items of its list when it is a lead-in or the question asks for steps.
fn around(units: &[Unit], at: usize, asks: Asks) -> Vec<usize> {
    let unit = &units[at];
    let mut picked = vec![at];
    // The list's items: the units of the block marked as items.
    let items: Vec<usize> = (0..units.len()).filter(|&i| units[i].block == unit.block && units[i].item).collect();
    if unit.item {
        // Its lead-in: the last unit before the first item, in the block or just before it.
        if let Some(&first) = items.first() {
            if first > 0 && leads_in(&units[first - 1]) {
                picked.push(first - 1);
            }
        }
        if asks == Asks::Steps {
            picked.extend(items.iter().copied().take(MAX_STEPS));
        }
    } else if leads_in(unit) {
        // A lead-in: the items that follow it (in its block, or the next block's list).
        let next: Vec<usize> = (at + 1..units.len()).take_while(|&i| units[i].item || units[i].block == unit.block).filter(|&i| units[i].item).take(MAX_STEPS).collect();
        picked.extend(next);
    }
    picked.sort_unstable();
    picked.dedup();
    picked
}

/// How far below the best unit's logit the runner-up may score and still join the evidence
/// (chosen on the dev halves: docs/EVAL.md, "Evidence first").
pub const SECOND_MARGIN: f32 = 2.0;

/// Most units [`Decision::ranked`] lists.
pub const RANKED: usize = 8;

/// Most list items given as steps.
pub const MAX_STEPS: usize = 8;

/// Scores every unit of `passages` against `question` with `scorer` (the cross-encoder) and
/// decides whether the best of them states the answer. `None` when the passages have no units.
pub fn decide(scorer: &FocusScorer, question: &str, passages: &[Passage<'_>]) -> Result<Option<Decision>> {
    let started = std::time::Instant::now();
    let per: Vec<Vec<Unit>> = passages.iter().map(|p| units(p.text)).collect();
    // Each unit is scored under its section's name: a sentence such as "It is never shared."
    // says what it is about only there.
    let shown: Vec<String> = per
        .iter()
        .zip(passages)
        .flat_map(|(us, p)| us.iter().map(move |u| if p.context.is_empty() { u.shown() } else { format!("{}: {}", p.context, u.shown()) }))
        .collect();
    if shown.is_empty() {
        return Ok(None);
    }
    let scored = ranked(scorer, question, &per, &shown)?;
    let score_of = |p: usize, u: usize| scored.iter().find(|&&(_, q, i)| (q, i) == (p, u)).map_or(f32::NEG_INFINITY, |s| s.0);
    // A passage's own question gives way to the unit after it, at its score.
    let best = scored.iter().find_map(|&(score, p, u)| Some((score, p, answer_to(&per[p], u)?)));
    let Some((best_logit, p, u)) = best else { return Ok(None) };
    let asked = asks(question);
    let mut picked: Vec<(usize, usize)> = around(&per[p], u, asked).into_iter().map(|i| (p, i)).collect();
    // The runner-up joins when it scores within SECOND_MARGIN of the best: the decisive
    // sentence is often the one next to the best-worded one.
    if let Some(&(score, q, i)) = scored.iter().filter(|&&(_, q, i)| !picked.contains(&(q, i)) && !per[q][i].is_question()).next() {
        if score >= best_logit - SECOND_MARGIN {
            picked.push((q, i));
        }
    }
    // In passage order, the best unit's passage first.
    picked.sort_by_key(|&(q, i)| (q != p, q, i));
    let evidence: Vec<EvidenceUnit> = picked
        .iter()
        .map(|&(q, i)| EvidenceUnit { passage: passages[q].id, index: i, text: readable(&per[q][i]), score: score_of(q, i), unit: per[q][i].clone() })
        .collect();
    let evidence_text = evidence.iter().map(|e| e.unit.shown()).collect::<Vec<_>>().join(" ").to_lowercase();
    let headings: String = picked.iter().map(|&(q, _)| passages[q].heading.to_lowercase()).collect::<Vec<_>>().join(" ");
    let around_text = format!("{evidence_text} {headings}");
    let all_text: String = passages.iter().map(|p| format!("{} {}\n", p.text, p.heading)).collect::<String>().to_lowercase();
    // A figure in a yes/no question is the asker's case ("Can I claim 250 pounds a night?"),
    // not a thing the documents must name: the rule that decides it holds its own figure.
    let terms: Vec<String> = specific_terms(question)
        .into_iter()
        .filter(|t| asked != Asks::YesNo || t.chars().any(char::is_alphabetic))
        .collect();
    let missing: Vec<String> = terms.iter().filter(|t| !holds_term(&around_text, t)).cloned().collect();
    let missing_everywhere: Vec<String> = missing.iter().filter(|t| !holds_term(&all_text, t)).cloned().collect();
    let evidence_words = evidence.iter().map(|e| e.unit.shown()).collect::<Vec<_>>().join(" ");
    let asked_words = content_words(question);
    let covering = content_words(&format!("{evidence_words} {headings}"));
    let uncovered = if asked_words.is_empty() { 0.0 } else { asked_words.iter().filter(|w| !covering.contains(*w)).count() as f32 / asked_words.len() as f32 };
    let kind_present = kind_present(asked, question, &evidence_words);
    let signals = Signals { best_logit, terms, missing, missing_everywhere, asks: asked, kind_present, uncovered };
    let score = probability(&signals);
    let outcome = if score >= ANSWERED_FLOOR { AnswerOutcome::Answered } else { AnswerOutcome::DoesNotSay };
    let ranked = scored
        .iter()
        .take(RANKED)
        .map(|&(score, q, i)| EvidenceUnit { passage: passages[q].id, index: i, text: readable(&per[q][i]), score, unit: per[q][i].clone() })
        .collect();
    Ok(Some(Decision { outcome, score, floor: ANSWERED_FLOOR, signals, evidence, ranked, ms: started.elapsed().as_secs_f64() * 1e3 }))
}

/// The probability, by [`WEIGHTS`], that evidence with these signals states the answer.
pub fn probability(signals: &Signals) -> f32 {
    let z: f32 = signals.features().iter().zip(WEIGHTS).map(|(x, w)| x * w).sum();
    1.0 / (1.0 + (-z).exp())
}

/// `sentence` with `marker` before its closing punctuation ("… trip [1]."), or after it with a
/// full stop when it has none ("GBP 210 [1].").
pub fn with_marker(sentence: &str, marker: &str) -> String {
    let s = sentence.trim_end();
    let body = s.trim_end_matches(['.', '!', '?', '…', ':', ';', ',']);
    let end = &s[body.len()..];
    let end = match end {
        "" | ";" | "," => ".",
        e => e,
    };
    format!("{} {marker}{end}", body.trim_end())
}

/// What an evidence-first answer says when the passages given hold no sentence at all (only
/// headings).
pub const NOTHING_TO_QUOTE: &str = "The documents do not say: the passages found hold headings and no sentence to quote; the closest ones are listed below.";

/// What the reader is told when the evidence does not state the answer: which of the asked
/// things no passage names, or what kind of answer the closest passage lacks.
pub fn does_not_say(signals: &Signals, question: &str) -> String {
    // Each term as the question spells it ("CISO", not "ciso").
    let spelled = |t: &String| {
        question.split_whitespace().map(trim_word).map(|w| w.strip_suffix("'s").or_else(|| w.strip_suffix("’s")).unwrap_or(w)).find(|w| w.to_lowercase() == *t).unwrap_or(t).to_string()
    };
    let named = |terms: &[String]| terms.iter().map(|t| format!("“{}”", spelled(t))).collect::<Vec<_>>().join(", ");
    if !signals.missing_everywhere.is_empty() {
        return format!("The documents do not say: none of the passages found mentions {}.", named(&signals.missing_everywhere));
    }
    if !signals.missing.is_empty() {
        return format!("The documents do not say: the closest passage does not mention {}.", named(&signals.missing));
    }
    let what = match signals.asks {
        Asks::Date => "a date or time for this",
        Asks::Number => "a figure for this",
        Asks::Name => "a name for this",
        Asks::Contact => "contact details for this",
        Asks::YesNo | Asks::Steps | Asks::Other => "what you asked",
    };
    format!("The documents do not say {what}; they cover the subject.")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kind_of_answer_asked_for() {
        for (q, want) in [
            ("When is the next fire drill?", Asks::Date),
            ("What year did the policy start?", Asks::Date),
            ("How many days do I have to submit a claim?", Asks::Number),
            ("How long is CCTV footage kept?", Asks::Number),
            ("Who approves a late expense claim?", Asks::Name),
            ("Which company runs the canteen?", Asks::Name),
            ("What's the service desk phone number?", Asks::Contact),
            ("What should I do if I lose my laptop?", Asks::Steps),
            ("How do I report a phishing e-mail?", Asks::Steps),
            ("Can I claim a hotel in London for 250 pounds a night?", Asks::YesNo),
            ("Does VACUUM FULL lock the table?", Asks::YesNo),
            ("What's the hotel cap in London?", Asks::Other),
        ] {
            assert_eq!(asks(q), want, "{q}");
        }
    }

    #[test]
    fn specific_terms_are_names_figures_and_code() {
        assert_eq!(specific_terms("Can I fly business class to Singapore?"), ["singapore"]);
        assert_eq!(specific_terms("Does pg_dump --clean drop the database in PostgreSQL 15?"), ["pg_dump", "--clean", "postgresql", "15"]);
        assert_eq!(specific_terms("What is the Rotterdam office's dress code?"), ["rotterdam"]);
        assert_eq!(specific_terms("How do I use NetworkManager on a server?"), ["networkmanager"]);
        assert!(specific_terms("What should I do if I lose my laptop?").is_empty());
        assert_eq!(specific_terms("What does \"hold back\" mean?"), ["hold", "back"]);
    }

    #[test]
    fn a_term_is_held_as_a_word_or_a_long_word_s_start() {
        assert!(holds_term("the rotterdam's office", "rotterdam"));
        assert!(holds_term("run pg_dump --clean", "pg_dump"));
        assert!(!holds_term("antwerpen", "antwerp") || "antwerp".len() >= 5);
        assert!(!holds_term("version 150", "15"));
        assert!(holds_term("postgresql 15 manual", "15"));
    }

    #[test]
    fn the_asked_kind_of_answer_is_looked_for_in_the_evidence() {
        assert!(kind_present(Asks::Date, "When does it start?", "It starts on 1 June 2024."));
        assert!(!kind_present(Asks::Date, "When does it start?", "A new shift was proposed by Ruben."));
        assert!(kind_present(Asks::Number, "How many?", "Passwords have at least fourteen characters."));
        assert!(!kind_present(Asks::Contact, "What's the desk's phone number?", "Call the service desk."));
        assert!(kind_present(Asks::Name, "Who approves a late claim?", "Unless the Head of Finance agrees."));
        assert!(!kind_present(Asks::Name, "Who at Harbourline approves claims?", "Claims at Harbourline are paid monthly."));
    }

    #[test]
    fn markers_go_before_the_closing_punctuation() {
        assert_eq!(with_marker("Claims are due within 30 days of the trip.", "[1]"), "Claims are due within 30 days of the trip [1].");
        assert_eq!(with_marker("City: London; Hotel: GBP 210", "[2]"), "City: London; Hotel: GBP 210 [2].");
        assert_eq!(with_marker("Is it free?", "[1]"), "Is it free [1]?");
        assert_eq!(with_marker("You must:", "[1]"), "You must [1]:");
    }

    /// Scores a unit by how many of the question's words it holds.
    struct Overlap;

    impl crate::rerank::Reranker for Overlap {
        fn model_id(&self) -> &str {
            "overlap"
        }
        fn score(&self, query: &str, passages: &[&str]) -> Result<Vec<f32>> {
            let words: Vec<String> = words_of(query);
            Ok(passages.iter().map(|p| 3.0 * words.iter().filter(|w| words_of(p).contains(w)).count() as f32).collect())
        }
        fn scores_sentences_cheaply(&self) -> bool {
            true
        }
    }

    fn scorer() -> FocusScorer {
        FocusScorer::Reranker(std::sync::Arc::new(Overlap))
    }

    #[test]
    fn a_swapped_site_is_a_near_miss_and_the_real_one_is_answered() {
        let table = "| City | Meals | Hotel |\n|---|---|---|\n| London | GBP 65 | GBP 210 |\n| Rotterdam | EUR 55 | EUR 160 |";
        let passages = [Passage { id: 1, text: table, heading: "Travel > Hotel caps".into(), context: String::new() }];
        let d = decide(&scorer(), "What is the hotel cap in London", &passages).unwrap().unwrap();
        assert_eq!(d.evidence[0].text, "City: London; Meals: GBP 65; Hotel: GBP 210");
        assert!(d.signals.missing.is_empty(), "{:?}", d.signals);
        let d = decide(&scorer(), "What is the hotel cap in Paris", &passages).unwrap().unwrap();
        assert_eq!(d.signals.missing_everywhere, ["paris"]);
        assert!(d.score < probability(&Signals { missing: vec![], missing_everywhere: vec![], ..d.signals.clone() }));
        let said = does_not_say(&d.signals, "What is the hotel cap in Paris");
        assert!(said.contains("none of the passages found mentions “Paris”"), "{said}");
    }

    #[test]
    fn a_figure_in_a_yes_no_question_is_the_askers_case_not_a_missing_term() {
        let table = "| City | Meals | Hotel |\n|---|---|---|\n| London | GBP 65 | GBP 210 |";
        let passages = [Passage { id: 1, text: table, heading: "Travel > Hotel caps".into(), context: String::new() }];
        let d = decide(&scorer(), "Can I claim a hotel in London for 250 pounds", &passages).unwrap().unwrap();
        assert_eq!(d.signals.asks, Asks::YesNo);
        assert_eq!(d.signals.terms, ["london"]);
        assert!(d.signals.missing.is_empty(), "{:?}", d.signals);
        let d = decide(&scorer(), "What is the hotel cap in London for 2025", &passages).unwrap().unwrap();
        assert_eq!(d.signals.missing, ["2025"], "a year asked about is a term: {:?}", d.signals);
    }

    #[test]
    fn a_list_item_comes_with_its_lead_in_and_steps_with_their_list() {
        let text = "If you lose a laptop:\n- Report it to the service desk within one hour.\n- Change your password.\n\nThe desk wipes it.";
        let passages = [Passage { id: 2, text, heading: String::new(), context: String::new() }];
        let d = decide(&scorer(), "Report lost laptop service desk hour", &passages).unwrap().unwrap();
        let got: Vec<&str> = d.evidence.iter().map(|e| e.text.as_str()).collect();
        assert_eq!(got, ["If you lose a laptop:", "- Report it to the service desk within one hour."]);
        let d = decide(&scorer(), "What should I do if I lose my laptop", &passages).unwrap().unwrap();
        let got: Vec<&str> = d.evidence.iter().map(|e| e.text.as_str()).collect();
        assert_eq!(got, ["If you lose a laptop:", "- Report it to the service desk within one hour.", "- Change your password."]);
        assert!(d.evidence.iter().all(|e| e.passage == 2));
    }
}
