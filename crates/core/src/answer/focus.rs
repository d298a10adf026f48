//! Focus: the few sentences of the retrieved passages that bear on the question, so the
//! generator reads those instead of whole passages.
//!
//! Imports `embed` and `rerank` (what scores each sentence against the question: the
//! cross-encoder when the tenant has one, else its embedder; [`FocusScorer`]), `answer::segment`
//! (a passage's units) and `error`. The units that score best against the question are kept, at most
//! [`PER_PASSAGE`] from one passage, in the order they have in it; a passage with none kept
//! leaves the prompt.
//!
//! Why (docs/ANSWERS.md): on the sample questions the 0.5B model, given whole passages,
//! answered with a heading or copied the first sentence; given the four closest sentences it
//! reached and cited the reference more often, with half the prompt tokens (the time to the first
//! token is the prompt's prefill). Scored by the embedder's cosine, the four kept dropped the
//! evidence sentence of a fifth of the held-out questions whose evidence retrieval had found (a
//! FAQ's answer is seldom the sentence worded most like the question); the cross-encoder reads
//! the question and the sentence together.

use std::sync::Arc;

use serde::Serialize;

use super::segment::{units, Unit};
use crate::embed::Embedder;
use crate::error::{Error, Result};
use crate::rerank::Reranker;
use crate::types::{cosine, TextKind};

/// Which model chooses the focused sentences (`answer.focus_by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FocusBy {
    /// The cross-encoder when the tenant's retrieval has one, else the embedder.
    #[default]
    Reranker,
    /// The tenant's embedder (cosine of the question's and the sentence's vectors).
    Embedder,
}

impl std::str::FromStr for FocusBy {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "reranker" => Ok(FocusBy::Reranker),
            "embedder" => Ok(FocusBy::Embedder),
            other => Err(Error::Invalid(format!("unknown focus scorer `{other}`; use reranker or embedder"))),
        }
    }
}

/// What scores a unit against the question; higher is closer.
#[derive(Clone)]
pub enum FocusScorer {
    /// The cosine of the embedder's query and passage vectors.
    Embedder(Arc<dyn Embedder>),
    /// The cross-encoder's logit for (question, unit).
    Reranker(Arc<dyn Reranker>),
}

impl FocusScorer {
    /// The scorer `by` asks for from the models at hand: the reranker falls back to the embedder
    /// when there is none or it is an LLM (a prefill per sentence).
    pub fn choose(by: FocusBy, embedder: Option<Arc<dyn Embedder>>, reranker: Option<Arc<dyn Reranker>>) -> Option<FocusScorer> {
        match (by, reranker) {
            (FocusBy::Reranker, Some(r)) if r.scores_sentences_cheaply() => Some(FocusScorer::Reranker(r)),
            _ => embedder.map(FocusScorer::Embedder),
        }
    }

    /// The name of the model that scores (which one [`FocusScorer::choose`] took).
    pub fn model_id(&self) -> String {
        match self {
            FocusScorer::Embedder(e) => e.model_id().to_string(),
            FocusScorer::Reranker(r) => r.model_id().to_string(),
        }
    }

    /// Whether the cross-encoder scores (its logit means the same on every corpus; a cosine
    /// does not): what an evidence-first answer and its decision need.
    pub fn is_cross_encoder(&self) -> bool {
        matches!(self, FocusScorer::Reranker(_))
    }

    /// One score per unit, in order.
    pub fn scores(&self, question: &str, units: &[&str]) -> Result<Vec<f32>> {
        match self {
            FocusScorer::Embedder(embedder) => {
                let vectors = embedder.embed(units, TextKind::Passage)?;
                let q = embedder.embed_one(question, TextKind::Query)?;
                Ok(vectors.iter().map(|v| cosine(&q.vector, &v.vector)).collect())
            }
            FocusScorer::Reranker(reranker) => reranker.score(question, units),
        }
    }
}

/// Most units kept from one passage: the kept units then come from at least two passages.
pub const PER_PASSAGE: usize = 2;

/// What [`focus`] chose.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Focused {
    /// The focused text of each passage, `None` for a passage none of whose units was kept.
    pub shown: Vec<Option<String>>,
}

/// Every unit of `per` (the units of each passage) scored against `question` as `texts` (one per
/// unit, in order) write it: `(score, passage, unit)`, best first, ties in passage order.
pub fn ranked(scorer: &FocusScorer, question: &str, per: &[Vec<Unit>], texts: &[String]) -> Result<Vec<(f32, usize, usize)>> {
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let scores = scorer.scores(question, &refs)?;
    let mut scored: Vec<(f32, usize, usize)> = per.iter().enumerate().flat_map(|(p, us)| (0..us.len()).map(move |u| (p, u))).zip(scores).map(|((p, u), s)| (s, p, u)).collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    Ok(scored)
}

/// The unit that answers for unit `u` of `units`: itself, or, when it is a question (a FAQ's
/// heading written as a sentence, which matches the question asked best and answers nothing),
/// the unit after it; `None` for a question with no answer after it.
pub fn answer_to(units: &[Unit], u: usize) -> Option<usize> {
    if !units[u].is_question() {
        return Some(u);
    }
    Some(u + 1).filter(|&n| units.get(n).is_some_and(|n| !n.is_question()))
}

/// The focused text of each passage: the `keep` units that `scorer` puts closest to `question`
/// over all passages (at most [`PER_PASSAGE`] from one), each passage's in its own order; `None`
/// for a passage none of whose units was kept. A table row's header is shown once before its
/// passage's first row.
pub fn focus(scorer: &FocusScorer, question: &str, passages: &[&str], keep: usize) -> Result<Focused> {
    let per: Vec<Vec<Unit>> = passages.iter().map(|p| units(p)).collect();
    let shown: Vec<String> = per.iter().flatten().map(Unit::shown).collect();
    if shown.is_empty() || keep == 0 {
        return Ok(Focused { shown: vec![None; passages.len()] });
    }
    let scored = ranked(scorer, question, &per, &shown)?;
    let mut chosen: Vec<Vec<usize>> = vec![Vec::new(); passages.len()];
    let mut kept = 0;
    for (_, p, u) in scored {
        if kept == keep {
            break;
        }
        if chosen[p].len() < PER_PASSAGE {
            chosen[p].push(u);
            kept += 1;
        }
    }
    let shown = chosen
        .into_iter()
        .zip(&per)
        .map(|(mut picked, units)| {
            if picked.is_empty() {
                return None;
            }
            picked.sort_unstable();
            let mut parts: Vec<&str> = Vec::new();
            for u in picked {
                let unit = &units[u];
                if !unit.header.is_empty() && !parts.contains(&unit.header.as_str()) {
                    parts.push(&unit.header);
                }
                parts.push(&unit.text);
            }
            Some(parts.join(" "))
        })
        .collect();
    Ok(Focused { shown })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::HashEmbedder;

    /// Scores a unit by how many of the question's words it holds; `cheap` says whether it is a
    /// cross-encoder.
    struct WordOverlap {
        cheap: bool,
    }

    impl Reranker for WordOverlap {
        fn model_id(&self) -> &str {
            "overlap"
        }
        fn score(&self, query: &str, passages: &[&str]) -> Result<Vec<f32>> {
            let words: Vec<String> = query.split_whitespace().map(str::to_lowercase).collect();
            Ok(passages.iter().map(|p| words.iter().filter(|w| p.to_lowercase().contains(w.as_str())).count() as f32).collect())
        }
        fn scores_sentences_cheaply(&self) -> bool {
            self.cheap
        }
    }

    #[test]
    fn the_cross_encoder_scores_when_asked_and_an_llm_reranker_never_does() {
        let embedder: Arc<dyn Embedder> = Arc::new(HashEmbedder::default());
        let cross: Arc<dyn Reranker> = Arc::new(WordOverlap { cheap: true });
        let llm: Arc<dyn Reranker> = Arc::new(WordOverlap { cheap: false });
        let pick = |by, r: Option<&Arc<dyn Reranker>>| FocusScorer::choose(by, Some(embedder.clone()), r.cloned()).map(|s| s.model_id());
        assert_eq!(pick(FocusBy::Reranker, Some(&cross)), Some("overlap".to_string()));
        assert_eq!(pick(FocusBy::Reranker, Some(&llm)), Some(embedder.model_id().to_string()));
        assert_eq!(pick(FocusBy::Reranker, None), Some(embedder.model_id().to_string()));
        assert_eq!(pick(FocusBy::Embedder, Some(&cross)), Some(embedder.model_id().to_string()));
        assert!(FocusScorer::choose(FocusBy::Reranker, None, None).is_none());
        assert_eq!("embedder".parse::<FocusBy>().unwrap(), FocusBy::Embedder);
        assert!("bm25".parse::<FocusBy>().unwrap_err().to_string().contains("use reranker or embedder"));
        // The reranker's scores choose the units.
        let scorer = FocusScorer::Reranker(cross);
        let got = focus(&scorer, "receipts kept years", &["Trains are second class. Receipts are kept for 7 years."], 1).unwrap();
        assert_eq!(got.shown, vec![Some("Receipts are kept for 7 years.".to_string())]);
    }

    #[test]
    fn a_question_gives_way_to_the_unit_after_it() {
        let per = units("Can I have Tk events handled while waiting for I/O? On platforms other than Windows, yes. Why Tk? How? Tk is a toolkit.");
        assert_eq!(answer_to(&per, 0), Some(1), "a FAQ's question: its answer stands in");
        assert_eq!(answer_to(&per, 1), Some(1));
        assert_eq!(answer_to(&per, 2), None, "a question with a question after it");
        assert!(Unit { text: "He asked: “is it free?”".into(), ..Unit::default() }.is_question());
        assert!(!Unit { text: "Why? Because it is.".into(), ..Unit::default() }.is_question());
        // Ranked best first, every unit once.
        let scorer = FocusScorer::Reranker(Arc::new(WordOverlap { cheap: true }));
        let texts: Vec<String> = per.iter().map(Unit::shown).collect();
        let got = ranked(&scorer, "tk toolkit", &[per.clone()], &texts).unwrap();
        assert_eq!(got.len(), per.len());
        assert_eq!(per[got[0].2].text, "Tk is a toolkit.");
    }

    #[test]
    fn setext_headings_and_table_rules_are_not_units() {
        let text = "Antwerp capacity\n~~~~~~~~~~~~~~~~\nRuben proposed a Saturday shift. Decision: it starts on\n1 June 2024.\n\n\
                    | Site | Start |\n| :--- | ---: |\n| Antwerp | 1 June |";
        let got: Vec<String> = units(text).into_iter().map(|u| u.shown()).collect();
        assert_eq!(
            got,
            [
                "Ruben proposed a Saturday shift.",
                "Decision: it starts on 1 June 2024.",
                "| Site | Start | | Antwerp | 1 June |"
            ]
        );
        assert!(units("# Title\n\n## 2 Scope\n").is_empty());
    }

    #[test]
    fn the_closest_units_are_kept_in_passage_order_and_at_most_two_per_passage() {
        let e = FocusScorer::Embedder(Arc::new(HashEmbedder::default()));
        // The fake embeds by hashed words: the units sharing the question's words score highest.
        let p1 = "Claims are due within 30 days of the trip. Trains are second class. Claims after 90 days are rejected.";
        let p2 = "Hotels are booked in the app. Claims within 30 days of the trip are paid.";
        let p3 = "The canteen opens at noon.";
        let got = focus(&e, "claims within 30 days of the trip", &[p1, p2, p3], 3).unwrap().shown;
        assert_eq!(got.len(), 3);
        let one = got[0].as_deref().unwrap();
        assert!(one.starts_with("Claims are due within 30 days of the trip."), "{one}");
        assert!(!one.contains("Trains"), "{one}");
        assert_eq!(got[1].as_deref(), Some("Claims within 30 days of the trip are paid."));
        assert_eq!(got[2], None);
        assert_eq!(focus(&e, "anything", &["## Only a heading"], 4).unwrap(), Focused { shown: vec![None] });
    }
}
