//! Follow-up evaluation (`ragbox eval --conversations FILE --corpus DIR`): conversations of two
//! or three turns (`tests/data/eval/conversations.jsonl`) asked in order through the chat path:
//! each turn made standalone with the turns before it ([`ragbox_core::answer::standalone`], the
//! generator's rewrite or the fallback), retrieved and answered like a single question.
//!
//! A follow-up's rewrite is judged against the conversation's reference: it must contain every
//! `keep` phrase (the resolved referent and the follow-up's own ask; `a|b` for either wording),
//! and a turn whose reference rewrite is the question itself (a change of subject) must reach
//! retrieval unchanged. Its answer is scored like an `eval --qa` question ([`super::qa`]).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use ragbox_core::conversation::memory::PriorTurn;
use ragbox_core::conversation::{standalone, Rewriter};
use ragbox_core::error::{Error, Result};
use crate::qa::{score, summarise, words, QaQuestion, QaReport, QaSetup};
use crate::run::Progress;
use crate::AnswerModels;
use ragbox_core::generate::{block_on, Discard};
use ragbox_core::store::{Store, VectorOptions};

/// One turn of a conversation: a question of the QA set plus its reference rewrite.
#[derive(Debug, Clone, Deserialize)]
pub struct Turn {
    /// The question as asked, with its references back.
    #[serde(flatten)]
    pub question: QaQuestion,
    /// The standalone question a good rewrite gives.
    pub rewrite: String,
    /// Phrases the standalone question must contain (`a|b`: either).
    #[serde(default)]
    pub keep: Vec<String>,
}

/// One conversation.
#[derive(Debug, Clone, Deserialize)]
pub struct Conversation {
    /// Its id.
    pub id: String,
    /// `dev` or `test`.
    pub split: Option<String>,
    /// What its follow-ups do: pronoun, ellipsis, what-if, topic-change, mixed.
    #[serde(default)]
    pub kind: String,
    /// The turns, in order.
    pub turns: Vec<Turn>,
}

/// What to evaluate.
pub struct ConversationPlan {
    /// The conversations (JSON lines of [`Conversation`]).
    pub conversations: PathBuf,
    /// Only this half.
    pub split: Option<String>,
    /// The documents, and the settings the turns are asked with (as `eval --qa` asks).
    pub setup: QaSetup,
    /// Prior turns a rewrite may use (`answer.memory_turns`).
    pub memory_turns: usize,
}

/// One follow-up's rewrite, judged.
#[derive(Debug, Clone, Serialize)]
pub struct RewriteRow {
    /// The conversation.
    pub conversation: String,
    /// Its kind.
    pub kind: String,
    /// The follow-up as asked.
    pub question: String,
    /// The reference rewrite.
    pub reference: String,
    /// What retrieval saw.
    pub standalone: String,
    /// How it was made.
    pub rewritten_by: Rewriter,
    /// What it lacks ([`judge`]): `keep` phrases, "one question", or "unchanged".
    pub missing: Vec<String>,
}

impl RewriteRow {
    /// It kept the intent and resolved the references.
    pub fn kept(&self) -> bool {
        self.missing.is_empty()
    }
}

/// Everything `eval --conversations` reports.
#[derive(Debug, Clone, Serialize)]
pub struct ConversationReport {
    /// Conversations asked.
    pub conversations: usize,
    /// Follow-ups (turns after the first).
    pub follow_ups: usize,
    /// Of those, rewrites that kept the intent and resolved the references.
    pub rewrites_kept: usize,
    /// Rewrites kept, per conversation kind: (kept, follow-ups).
    pub by_kind: std::collections::BTreeMap<String, [usize; 2]>,
    /// Every follow-up's rewrite.
    pub rewrites: Vec<RewriteRow>,
    /// The answers to the follow-ups, scored like `eval --qa`.
    pub follow_up_answers: QaReport,
    /// The answers to the first turns.
    pub first_answers: QaReport,
}

/// Reads the conversations of `split`.
pub fn load(path: &std::path::Path, split: Option<&str>) -> Result<Vec<Conversation>> {
    let text = std::fs::read_to_string(path).map_err(Error::path(path))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let c: Conversation = serde_json::from_str(line)
            .map_err(|e| Error::Invalid(format!("{}:{}: not a conversation line: {e}", path.display(), i + 1)))?;
        if c.turns.len() < 2 {
            return Err(Error::Invalid(format!("{}:{}: a conversation needs two turns or more", path.display(), i + 1)));
        }
        if split.is_none_or(|want| c.split.as_deref().is_none_or(|s| s == want)) {
            out.push(c);
        }
    }
    if out.is_empty() {
        return Err(Error::Invalid(format!("{} holds no conversations for that half", path.display())));
    }
    Ok(out)
}

/// What `standalone` lacks: the `keep` phrases it does not contain, and "one question" when it
/// is two questions run together (the earlier question followed by the follow-up, its reference
/// unresolved). For a turn whose reference is the question itself, it must be the question
/// unchanged ("unchanged").
pub fn judge(turn: &Turn, standalone: &str) -> Vec<String> {
    let asked = words(&turn.question.question);
    if words(&turn.rewrite) == asked {
        return if words(standalone) == asked { Vec::new() } else { vec!["unchanged".to_string()] };
    }
    let questions = standalone.split(['?', '.']).filter(|s| s.chars().any(char::is_alphanumeric)).count();
    let mut missing: Vec<String> = if questions > 1 { vec!["one question".to_string()] } else { Vec::new() };
    let got = words(standalone).join(" ");
    let has = |phrase: &str| {
        let w = words(phrase).join(" ");
        !w.is_empty() && format!(" {got} ").contains(&format!(" {w} "))
    };
    missing.extend(turn.keep.iter().filter(|k| !k.split('|').any(|alt| has(alt))).cloned());
    missing
}

/// Runs the plan with `models`.
pub fn run(plan: &ConversationPlan, models: &AnswerModels, progress: Progress<'_>) -> Result<ConversationReport> {
    let AnswerModels { embedder, generator, reranker } = models.clone();
    let conversations = load(&plan.conversations, plan.split.as_deref())?;
    let store = Store::open(&plan.setup.scratch, VectorOptions::default())?;
    let (retriever, answerer) = plan.setup.answer_path(&store, &embedder, &generator, reranker, progress)?;
    let (mut firsts, mut follow_ups, mut rewrites) = (Vec::new(), Vec::new(), Vec::new());
    for (n, c) in conversations.iter().enumerate() {
        // (question, standalone, answer) of the turns so far.
        let mut history: Vec<(String, String, String)> = Vec::new();
        for (i, turn) in c.turns.iter().enumerate() {
            let t = std::time::Instant::now();
            let prior: Vec<PriorTurn> =
                history.iter().map(|(q, s, a)| PriorTurn { question: q, standalone: s, answer: a }).collect();
            let asked = &turn.question.question;
            let made = block_on(standalone(asked, &prior, plan.memory_turns, Some(generator.as_ref())))?;
            let retrieval = retriever.retrieve(&made.question)?;
            let a = block_on(answerer.answer(asked, &made.question, &retrieval, &mut Discard))?;
            let row = score(&c.kind, &turn.question, &retrieval, &a, plan.setup.answer.passages, t.elapsed().as_secs_f64() * 1e3);
            if i == 0 {
                firsts.push(row);
            } else {
                let judged = RewriteRow {
                    conversation: c.id.clone(),
                    kind: c.kind.clone(),
                    question: asked.clone(),
                    reference: turn.rewrite.clone(),
                    standalone: made.question.clone(),
                    rewritten_by: made.rewritten_by,
                    missing: judge(turn, &made.question),
                };
                progress(&format!(
                    "{}/{} {}: \"{}\" → \"{}\"{}",
                    n + 1,
                    conversations.len(),
                    c.id,
                    asked,
                    made.question,
                    if judged.kept() { String::new() } else { format!(" (lacks {})", judged.missing.join(", ")) }
                ));
                rewrites.push(judged);
                follow_ups.push(row);
            }
            history.push((asked.clone(), made.question, a.answer.clone()));
        }
    }
    let mut by_kind = std::collections::BTreeMap::new();
    for r in &rewrites {
        let e: &mut [usize; 2] = by_kind.entry(r.kind.clone()).or_default();
        e[0] += usize::from(r.kept());
        e[1] += 1;
    }
    Ok(ConversationReport {
        conversations: conversations.len(),
        follow_ups: rewrites.len(),
        rewrites_kept: rewrites.iter().filter(|r| r.kept()).count(),
        by_kind,
        rewrites,
        follow_up_answers: summarise("follow-ups", generator.model_id(), &plan.setup.answer, follow_ups),
        first_answers: summarise("first turns", generator.model_id(), &plan.setup.answer, firsts),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(question: &str, rewrite: &str, keep: &[&str]) -> Turn {
        let line = serde_json::json!({
            "question": question, "answer": null, "file": null, "evidence": null, "answerable": false,
            "rewrite": rewrite, "keep": keep,
        });
        serde_json::from_value(line).unwrap()
    }

    #[test]
    fn a_rewrite_keeps_every_phrase_or_is_missing_it() {
        let t = turn("How long are they kept?", "How long are the visitor logs kept?", &["visitor logs", "how long", "kept|retained"]);
        assert!(judge(&t, "How long are the visitor logs retained?").is_empty());
        // The earlier question and the follow-up run together hold the words but resolve nothing.
        assert_eq!(judge(&t, "Who owns the visitor logs? How long are they kept?"), vec!["one question"]);
        assert_eq!(judge(&t, "Who owns the visitor logs?"), vec!["how long", "kept|retained"]);
        // Phrases match whole words only.
        assert_eq!(judge(&t, "How long are the visitor logsheets kept?"), vec!["visitor logs"]);
    }

    #[test]
    fn a_change_of_subject_must_not_be_rewritten() {
        let t = turn("What is the Wi-Fi policy?", "What is the Wi-Fi policy?", &[]);
        assert!(judge(&t, "What is the Wi-Fi policy?").is_empty());
        assert_eq!(judge(&t, "What is the Wi-Fi policy for visitor logs?"), vec!["unchanged"]);
    }
}
