//! Support flags: a second, cheap pass that scores how well each answer sentence is backed by the
//! passages it cites. Two methods, compared by `ragbox eval --answers`:
//!
//! - [`SupportMethod::Similarity`]: the embedder's cosine similarity of the sentence to the
//!   closest sentence of its cited passages (a proxy for entailment; tens of milliseconds);
//! - [`SupportMethod::Llm`]: the generator's log-odds of "yes" over "no" to "does the passage
//!   support the claim?" (one prompt per sentence; seconds on a CPU).
//!
//! A sentence with no valid citation has no support to check and scores `None`: it is flagged.

use std::sync::Arc;

use serde::Serialize;

use super::prompt::support_messages;
use crate::chunk::sentence::sentences;
use crate::embed::Embedder;
use crate::error::Result;
use crate::generate::Generator;
use crate::types::{cosine, TextKind};

/// How support is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SupportMethod {
    /// Embedding cosine to the closest cited sentence.
    Similarity,
    /// The generator's yes/no log-odds.
    Llm,
    /// No check: every cited sentence counts as supported.
    Off,
}

impl std::str::FromStr for SupportMethod {
    type Err = crate::error::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "similarity" => Ok(SupportMethod::Similarity),
            "llm" => Ok(SupportMethod::Llm),
            "off" => Ok(SupportMethod::Off),
            other => Err(crate::error::Error::Invalid(format!("support method `{other}`: use similarity, llm or off"))),
        }
    }
}

/// One claim and the passages it cites.
#[derive(Debug, Clone)]
pub struct Claim<'a> {
    /// The sentence without its citation markers.
    pub text: String,
    /// The texts of the passages it cites (none: uncited).
    pub passages: Vec<&'a str>,
}

/// Scores claims against their cited passages, by one method.
pub enum SupportChecker {
    /// Embedding cosine with this embedder.
    Similarity(Arc<dyn Embedder>),
    /// Yes/no log-odds from this generator.
    Llm(Arc<dyn Generator>),
    /// No checking.
    Off,
}

impl SupportChecker {
    /// The method in use.
    pub fn method(&self) -> SupportMethod {
        match self {
            SupportChecker::Similarity(_) => SupportMethod::Similarity,
            SupportChecker::Llm(_) => SupportMethod::Llm,
            SupportChecker::Off => SupportMethod::Off,
        }
    }

    /// One score per claim, in input order; `None` for a claim that cites nothing (or when
    /// checking is off).
    pub async fn scores(&self, claims: &[Claim<'_>]) -> Result<Vec<Option<f32>>> {
        let cited: Vec<usize> = (0..claims.len()).filter(|&i| !claims[i].passages.is_empty()).collect();
        let mut out = vec![None; claims.len()];
        if cited.is_empty() {
            return Ok(out);
        }
        match self {
            SupportChecker::Similarity(e) => {
                for (i, score) in cited.iter().zip(similarity_scores(e.as_ref(), claims, &cited)?) {
                    out[*i] = Some(score);
                }
            }
            SupportChecker::Llm(g) => {
                let prompts: Vec<_> =
                    cited.iter().map(|&i| support_messages(&claims[i].text, &claims[i].passages)).collect();
                for (i, score) in cited.iter().zip(g.yes_no(&prompts).await?) {
                    out[*i] = Some(score);
                }
            }
            SupportChecker::Off => {}
        }
        Ok(out)
    }
}

/// Cosine of each cited claim to the closest sentence of the passages it cites.
fn similarity_scores(embedder: &dyn Embedder, claims: &[Claim<'_>], cited: &[usize]) -> Result<Vec<f32>> {
    // Every distinct passage sentence once, then every claim.
    let mut pieces: Vec<&str> = Vec::new();
    let mut per_claim: Vec<Vec<usize>> = Vec::new();
    let mut seen = std::collections::HashMap::new();
    for &i in cited {
        let mut mine = Vec::new();
        for passage in &claims[i].passages {
            for r in sentences(passage) {
                let s = passage[r].trim();
                if s.is_empty() {
                    continue;
                }
                let at = *seen.entry(s).or_insert_with(|| {
                    pieces.push(s);
                    pieces.len() - 1
                });
                mine.push(at);
            }
        }
        per_claim.push(mine);
    }
    let claim_texts: Vec<&str> =
        cited.iter().map(|&i| if claims[i].text.trim().is_empty() { "-" } else { claims[i].text.as_str() }).collect();
    let passage_vectors = if pieces.is_empty() { Vec::new() } else { embedder.embed(&pieces, TextKind::Passage)? };
    let claim_vectors = embedder.embed(&claim_texts, TextKind::Passage)?;
    Ok(claim_vectors
        .iter()
        .zip(&per_claim)
        .map(|(c, mine)| {
            mine.iter().map(|&p| cosine(&c.vector, &passage_vectors[p].vector)).fold(0.0f32, f32::max)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::HashEmbedder;

    #[test]
    fn a_claim_scores_against_its_closest_cited_sentence() {
        let checker = SupportChecker::Similarity(Arc::new(HashEmbedder::default()));
        let passage = "Staff travel insurance covers medical costs abroad. The canteen opens at noon.";
        let claims = vec![
            Claim { text: "The canteen opens at noon.".into(), passages: vec![passage] },
            Claim { text: "Bicycles are reimbursed monthly.".into(), passages: vec![passage] },
            Claim { text: "Uncited sentence.".into(), passages: vec![] },
        ];
        let scores = crate::generate::block_on(checker.scores(&claims)).unwrap();
        assert!((scores[0].unwrap() - 1.0).abs() < 1e-5, "{scores:?}");
        assert!(scores[1].unwrap() < 0.5, "{scores:?}");
        assert_eq!(scores[2], None);
    }

    #[test]
    fn off_scores_nothing() {
        let claims = vec![Claim { text: "x".into(), passages: vec!["x"] }];
        assert_eq!(crate::generate::block_on(SupportChecker::Off.scores(&claims)).unwrap(), vec![None]);
    }
}
