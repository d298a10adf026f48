//! Conversation: a question asked in a session becomes one standalone question for retrieval.
//! [`follow_up`] decides whether it refers back at all (rule-based), [`memory`] picks the earlier
//! turns that matter and writes the rewrite prompt, [`resolve`] replaces a reference without a
//! model, and [`standalone`] puts them together. Nothing here stores turns or answers: the caller
//! loads the session's turns from the store, and answering sees only the
//! standalone question.
//!
//! May import `types`, `error`, `generate` and `words`.

use std::time::Instant;

use serde::Serialize;

use crate::error::Result;
use crate::generate::{GenerateRequest, Generator};

pub mod follow_up;
pub mod memory;
pub mod resolve;

/// How a question's standalone form was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rewriter {
    /// Self-contained (or no history): asked as it is.
    None,
    /// Rewritten by the generator with the turns that matter.
    Generator,
    /// Its reference replaced by what the question before it names ([`resolve`]).
    Resolved,
    /// The generator's rewrite was unusable (or none was given): the latest relevant turn's
    /// question followed by the follow-up.
    Fallback,
}

/// A question as retrieval will see it, and how it got that way.
#[derive(Debug, Clone, Serialize)]
pub struct Standalone {
    /// The standalone question.
    pub question: String,
    /// What made it a follow-up, if anything.
    pub cue: Option<follow_up::FollowUpCue>,
    /// The prior turns it was rewritten with (indices into the turns given, oldest first).
    pub turns: Vec<usize>,
    /// How it was made.
    pub rewritten_by: Rewriter,
    /// Milliseconds spent rewriting.
    pub rewrite_ms: f64,
}

/// Resolves `question` against the session's `prior` turns (oldest first): a self-contained
/// question is returned as it is and sees no history; a follow-up that refers back is rewritten
/// by `generator` with at most `max_turns` turns that matter (the latest, plus earlier ones it
/// shares words with), or by the deterministic fallback when there is no generator or its
/// rewrite is unusable.
pub async fn standalone(
    question: &str,
    prior: &[memory::PriorTurn<'_>],
    max_turns: usize,
    generator: Option<&dyn Generator>,
) -> Result<Standalone> {
    let started = Instant::now();
    let as_is = |cue| Standalone { question: question.to_string(), cue, turns: Vec::new(), rewritten_by: Rewriter::None, rewrite_ms: 0.0 };
    let cue = match follow_up::refers_back(question) {
        Some(cue) => cue,
        // A what-if continues the conversation's subject without pointing at it.
        None if follow_up::continues(question) && !prior.is_empty() => {
            follow_up::FollowUpCue { kind: follow_up::CueKind::Ellipsis, text: question.split_whitespace().take(2).collect::<Vec<_>>().join(" ") }
        }
        None => return Ok(as_is(None)),
    };
    if prior.is_empty() || max_turns == 0 {
        return Ok(as_is(Some(cue)));
    }
    let turns = memory::relevant_turns(question, prior, max_turns);
    let chosen: Vec<memory::PriorTurn> = turns.iter().map(|&i| prior[i]).collect();
    let mut rewritten = None;
    if let Some(g) = generator {
        let request = GenerateRequest::greedy(memory::rewrite_messages(question, &chosen), 64);
        let reply = g.generate(&request, &mut crate::generate::Discard).await?;
        // A rewrite with words from nowhere in the conversation is the model's invention.
        rewritten = memory::clean_rewrite(&reply.text, question).filter(|r| memory::made_up_words(r, question, &chosen).len() <= 1);
    }
    let before = chosen.last().map(|t| if t.standalone.trim().is_empty() { t.question } else { t.standalone });
    let resolved = before.and_then(|b| resolve::resolve(question, b));
    let (text, by) = match (rewritten, resolved) {
        (Some(q), _) => (q, Rewriter::Generator),
        (None, Some(q)) => (q, Rewriter::Resolved),
        (None, None) => (memory::fallback_rewrite(question, &chosen), Rewriter::Fallback),
    };
    Ok(Standalone { question: text, cue: Some(cue), turns, rewritten_by: by, rewrite_ms: started.elapsed().as_secs_f64() * 1e3 })
}
