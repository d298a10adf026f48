//! Evidence first: the unit of the retrieved passages that states the answer to a question, and
//! the decision whether any does.
//!
//! Imports `answer::focus` (units and the scorer), `answer::quote` (a table row as a reader reads
//! it), `rerank` (the reader's reading) and `error`. No generator: the decision is made before any
//! is asked.
//!
//! Every unit (sentence, list item, table row) of the passages given is read in its context
//! ([`reader_text`]: under its section's name, a list item after its list's lead-in, a table row
//! after its header row) by the reader (`rerank::reader`): a network trained on the
//! cross-encoder's pooled states to tell whether the unit states the answer. Its probability
//! chooses the evidence and decides: at or above [`ANSWERED_FLOOR`] the question is answered with
//! it, below it the outcome is [`AnswerOutcome::DoesNotSay`] with the closest unit. A cross-encoder
//! without a reader decides by its relevance logit instead (its sigmoid, at the same floor).
//!
//! The evidence is the chosen unit with what it needs to be read on its own: a list item its
//! lead-in, a lead-in the items it introduces, a "what should I do" question the steps of its
//! list, and a second unit the reader rates at least [`JOIN_FLOOR`].
//!
//! ```
//! use ragbox_core::answer::evidence::{asks, Asks};
//! assert_eq!(asks("What should I do if I lose my laptop?"), Asks::Steps);
//! assert_eq!(asks("Can I fly business class to Singapore?"), Asks::YesNo);
//! ```

use serde::Serialize;

use super::focus::{answer_to, FocusScorer};
use super::quote::readable;
use super::segment::{units, Unit};
use crate::error::Result;
use crate::rerank::Reading;

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

/// What the question's wording says about the shape of its answer (not whether it is answered).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Asks {
    /// "Can I …?", "Is it …?": a rule that says yes or no (the generator may put a verdict first).
    YesNo,
    /// "What should I do if …?", "How do I …?": the steps of a list.
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
    /// The probability that it states the answer ([`Decision::by`] says whose).
    pub score: f32,
    /// The cross-encoder's relevance logit for (question, unit in context).
    pub logit: f32,
    /// The unit itself.
    #[serde(skip)]
    pub unit: Unit,
}

/// What decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DecidedBy {
    /// The reader trained on the cross-encoder's states.
    Reader,
    /// The cross-encoder's relevance logit (a model shipped without a reader).
    Logit,
}

/// The signals the decision weighs (`--explain`, `--json`).
#[derive(Debug, Clone, Serialize)]
pub struct Signals {
    /// The cross-encoder's relevance logit on the evidence unit.
    pub best_logit: f32,
    /// The shape of answer the question's wording asks for.
    pub asks: Asks,
}

/// Below this probability that the evidence states the answer, the outcome is
/// [`AnswerOutcome::DoesNotSay`] (chosen on held-out training questions and the dev halves:
/// docs/EVAL.md, "The reader").
pub const ANSWERED_FLOOR: f32 = 0.7;

/// A second unit joins the evidence of an answered question when the reader rates it at least
/// this (an answer that spans two units or two documents; chosen on the dev halves: docs/EVAL.md,
/// "The reader").
pub const JOIN_FLOOR: f32 = 0.5;

/// The decision and what it rests on.
#[derive(Debug, Clone, Serialize)]
pub struct Decision {
    /// [`AnswerOutcome::Answered`] or [`AnswerOutcome::DoesNotSay`] (a refused retrieval never reaches it).
    pub outcome: AnswerOutcome,
    /// The probability that the evidence states the answer.
    pub score: f32,
    /// The floor it was compared with.
    pub floor: f32,
    /// Who gave the probability.
    pub by: DecidedBy,
    /// What it weighed.
    pub signals: Signals,
    /// The evidence: the best unit and what it needs to be read on its own, in passage order.
    pub evidence: Vec<EvidenceUnit>,
    /// The units that scored best, best first, at most [`RANKED`] (`--explain`).
    pub ranked: Vec<EvidenceUnit>,
    /// Milliseconds: reading every unit and deciding.
    pub ms: f64,
}

/// Words that open a yes/no question.
const YES_NO_OPENERS: &[&str] = &[
    "can", "could", "may", "might", "is", "are", "am", "was", "were", "do", "does", "did", "should", "must", "will", "would",
    "shall", "has", "have", "had", "isn't", "aren't", "doesn't", "don't", "can't", "won't", "shouldn't",
];

/// The shape of answer `question` asks for, from its wording.
pub fn asks(question: &str) -> Asks {
    let q = question.to_lowercase();
    let q = q.trim_start_matches(|c: char| !c.is_alphanumeric());
    let words: Vec<&str> = q.split(|c: char| !(c.is_alphanumeric() || c == '\'')).filter(|w| !w.is_empty()).collect();
    let has = |phrase: &str| q.contains(phrase);
    let first = words.first().copied().unwrap_or("");
    if has("what should i do") || has("what do i do") || has("what should we do") || has("what are the steps") || first == "how" && words.get(1).is_some_and(|w| matches!(*w, "do" | "can" | "should" | "to")) {
        return Asks::Steps;
    }
    if YES_NO_OPENERS.contains(&first) {
        return Asks::YesNo;
    }
    Asks::Other
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
        picked.extend(lead_in_of(units, at));
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

/// Most units [`Decision::ranked`] lists.
pub const RANKED: usize = 8;

/// Most list items given as steps.
pub const MAX_STEPS: usize = 8;

/// The unit before the first item of `at`'s list when `at` is a list item and that unit
/// introduces the list.
fn lead_in_of(units: &[Unit], at: usize) -> Option<usize> {
    let unit = &units[at];
    if !unit.item {
        return None;
    }
    let first = (0..units.len()).find(|&i| units[i].block == unit.block && units[i].item)?;
    (first > 0 && leads_in(&units[first - 1])).then(|| first - 1)
}

/// What the reader reads for unit `at` of `units`: the unit under `context` (its section's name,
/// or its document's title), a list item after its list's lead-in, a table row after its header
/// row. The same text at training (`ragbox eval --reader-features`) and when answering.
pub fn reader_text(context: &str, units: &[Unit], at: usize) -> String {
    let unit = units[at].shown();
    let body = match lead_in_of(units, at) {
        Some(lead) => format!("{} {unit}", units[lead].text),
        None => unit,
    };
    if context.is_empty() {
        body
    } else {
        format!("{context}: {body}")
    }
}

/// Reads every unit of `passages` against `question` and decides whether the best of them states
/// the answer. `None` when the passages have no units.
pub fn decide(scorer: &FocusScorer, question: &str, passages: &[Passage<'_>]) -> Result<Option<Decision>> {
    let started = std::time::Instant::now();
    let per: Vec<Vec<Unit>> = passages.iter().map(|p| units(p.text)).collect();
    let texts: Vec<String> = per.iter().zip(passages).flat_map(|(us, p)| (0..us.len()).map(move |i| reader_text(&p.context, us, i))).collect();
    if texts.is_empty() {
        return Ok(None);
    }
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let read = match scorer {
        FocusScorer::Reranker(r) => r.read(question, &refs)?,
        FocusScorer::Embedder(_) => None,
    };
    let (by, readings) = match read {
        Some(readings) => (DecidedBy::Reader, readings),
        None => {
            let logits = scorer.scores(question, &refs)?;
            (DecidedBy::Logit, logits.into_iter().map(|logit| Reading { probability: sigmoid(logit), logit }).collect())
        }
    };
    let at: Vec<(usize, usize)> = per.iter().enumerate().flat_map(|(p, us)| (0..us.len()).map(move |u| (p, u))).collect();
    let mut scored: Vec<(Reading, usize, usize)> = at.iter().zip(&readings).map(|(&(p, u), r)| (*r, p, u)).collect();
    scored.sort_by(|a, b| b.0.probability.total_cmp(&a.0.probability).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    let reading_of = |p: usize, u: usize| scored.iter().find(|s| (s.1, s.2) == (p, u)).map(|s| s.0);
    // A passage's own question gives way to the unit after it.
    let best = scored.iter().find_map(|&(reading, p, u)| Some((reading, p, answer_to(&per[p], u)?)));
    let Some((best_reading, p, u)) = best else { return Ok(None) };
    let score = best_reading.probability;
    let outcome = if score >= ANSWERED_FLOOR { AnswerOutcome::Answered } else { AnswerOutcome::DoesNotSay };
    let asked = asks(question);
    let mut picked: Vec<(usize, usize)> = around(&per[p], u, asked).into_iter().map(|i| (p, i)).collect();
    // A second unit the reader rates at least JOIN_FLOOR joins it: an answer that spans two.
    if outcome == AnswerOutcome::Answered {
        if let Some(&(r, q, i)) = scored.iter().find(|&&(_, q, i)| !picked.contains(&(q, i)) && !per[q][i].is_question()) {
            if r.probability >= JOIN_FLOOR {
                picked.extend(around(&per[q], i, asked).into_iter().map(|j| (q, j)).filter(|x| !picked.contains(x)).collect::<Vec<_>>());
            }
        }
    }
    // In passage order, the best unit's passage first.
    picked.sort_by_key(|&(q, i)| (q != p, q, i));
    let unit_of = |q: usize, i: usize, r: Option<Reading>| EvidenceUnit {
        passage: passages[q].id,
        index: i,
        text: readable(&per[q][i]),
        score: r.map_or(f32::NAN, |r| r.probability),
        logit: r.map_or(f32::NAN, |r| r.logit),
        unit: per[q][i].clone(),
    };
    let evidence: Vec<EvidenceUnit> = picked.iter().map(|&(q, i)| unit_of(q, i, reading_of(q, i))).collect();
    let ranked = scored.iter().take(RANKED).map(|&(r, q, i)| unit_of(q, i, Some(r))).collect();
    let signals = Signals { best_logit: best_reading.logit, asks: asked };
    Ok(Some(Decision { outcome, score, floor: ANSWERED_FLOOR, by, signals, evidence, ranked, ms: started.elapsed().as_secs_f64() * 1e3 }))
}

fn sigmoid(z: f32) -> f32 {
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

/// What an evidence-first answer says when the evidence does not state the answer; the closest
/// unit follows it.
pub const DOES_NOT_SAY: &str = "The documents do not say; the closest passages are on the subject but none states it.";
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shape_of_answer_asked_for() {
        for (q, want) in [
            ("What should I do if I lose my laptop?", Asks::Steps),
            ("How do I report a phishing e-mail?", Asks::Steps),
            ("Can I claim a hotel in London for 250 pounds a night?", Asks::YesNo),
            ("Does VACUUM FULL lock the table?", Asks::YesNo),
            ("What's the hotel cap in London?", Asks::Other),
            ("When is the next fire drill?", Asks::Other),
        ] {
            assert_eq!(asks(q), want, "{q}");
        }
    }

    #[test]
    fn markers_go_before_the_closing_punctuation() {
        assert_eq!(with_marker("Claims are due within 30 days of the trip.", "[1]"), "Claims are due within 30 days of the trip [1].");
        assert_eq!(with_marker("City: London; Hotel: GBP 210", "[2]"), "City: London; Hotel: GBP 210 [2].");
        assert_eq!(with_marker("Is it free?", "[1]"), "Is it free [1]?");
        assert_eq!(with_marker("You must:", "[1]"), "You must [1]:");
    }

    #[test]
    fn the_reader_reads_a_unit_under_its_section_and_an_item_after_its_lead_in() {
        let text = "If you lose a laptop:\n- Report it to the service desk within one hour.\n- Change your password.\n\n| City | Hotel |\n|---|---|\n| London | GBP 210 |";
        let us = units(text);
        let got: Vec<String> = (0..us.len()).map(|i| reader_text("Lost devices", &us, i)).collect();
        assert_eq!(got, [
            "Lost devices: If you lose a laptop:",
            "Lost devices: If you lose a laptop: - Report it to the service desk within one hour.",
            "Lost devices: If you lose a laptop: - Change your password.",
            "Lost devices: | City | Hotel | | London | GBP 210 |",
        ]);
        assert_eq!(reader_text("", &us, 0), "If you lose a laptop:");
    }

    fn words_of(text: &str) -> Vec<String> {
        text.to_lowercase().split(|c: char| !(c.is_alphanumeric() || c == '\'')).filter(|w| !w.is_empty()).map(str::to_string).collect()
    }

    /// Scores a unit by how many of the question's words it holds, minus one: a logit.
    struct Overlap;

    impl crate::rerank::Reranker for Overlap {
        fn model_id(&self) -> &str {
            "overlap"
        }
        fn score(&self, query: &str, passages: &[&str]) -> Result<Vec<f32>> {
            let words: Vec<String> = words_of(query);
            Ok(passages.iter().map(|p| words.iter().filter(|w| words_of(p).contains(w)).count() as f32 - 1.0).collect())
        }
        fn scores_sentences_cheaply(&self) -> bool {
            true
        }
    }

    fn scorer() -> FocusScorer {
        FocusScorer::Reranker(std::sync::Arc::new(Overlap))
    }

    #[test]
    fn without_a_reader_the_logit_decides_at_the_floor() {
        let table = "| City | Meals | Hotel |\n|---|---|---|\n| London | GBP 65 | GBP 210 |\n| Rotterdam | EUR 55 | EUR 160 |";
        let passages = [Passage { id: 1, text: table, heading: "Travel > Hotel caps".into(), context: String::new() }];
        let d = decide(&scorer(), "What is the hotel cap in London", &passages).unwrap().unwrap();
        assert_eq!(d.by, DecidedBy::Logit);
        assert_eq!(d.evidence[0].text, "City: London; Meals: GBP 65; Hotel: GBP 210");
        assert_eq!(d.outcome, AnswerOutcome::Answered, "{d:?}");
        assert!((d.score - sigmoid(d.signals.best_logit)).abs() < 1e-6);
        let d = decide(&scorer(), "Is there a Paris office", &passages).unwrap().unwrap();
        assert_eq!(d.outcome, AnswerOutcome::DoesNotSay, "{d:?}");
        assert_eq!(d.evidence.len(), 1, "the closest unit alone: {d:?}");
    }

    #[test]
    fn a_list_item_comes_with_its_lead_in_and_steps_with_their_list() {
        let text = "If you lose a laptop:\n- Report it to the service desk within one hour.\n- Change your password.\n\nThe desk wipes it.";
        let passages = [Passage { id: 2, text, heading: String::new(), context: String::new() }];
        let d = decide(&scorer(), "Report within one hour", &passages).unwrap().unwrap();
        let got: Vec<&str> = d.evidence.iter().map(|e| e.text.as_str()).collect();
        assert_eq!(got, ["If you lose a laptop:", "- Report it to the service desk within one hour."]);
        let d = decide(&scorer(), "What should I do if I lose my laptop", &passages).unwrap().unwrap();
        let got: Vec<&str> = d.evidence.iter().map(|e| e.text.as_str()).collect();
        assert_eq!(got, ["If you lose a laptop:", "- Report it to the service desk within one hour.", "- Change your password."]);
        assert!(d.evidence.iter().all(|e| e.passage == 2));
    }
}
