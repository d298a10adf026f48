//! Support flags: a second, cheap pass that scores how well each answer sentence is backed by the
//! passages it cites, and says why when it is not. Three methods, compared by `ragbox eval
//! --support` on labelled sentences:
//!
//! - [`SupportMethod::Grounded`] (the default): every figure, name and negation of the sentence
//!   must be in the passages it cites (or in the question it answers), and the sentence must be
//!   close to them: the larger of its cosine to their closest sentence and the share of its
//!   content words they contain. A short correct sentence ("The London cap is GBP 210.") scores
//!   low by cosine against a long passage sentence but holds all its words; a sentence with a
//!   figure or name swapped holds them all but one;
//! - [`SupportMethod::Similarity`]: the embedder's cosine similarity of the sentence to the
//!   closest sentence of its cited passages (a proxy for entailment; tens of milliseconds);
//! - [`SupportMethod::Llm`]: the generator's log-odds of "yes" over "no" to "does the passage
//!   support the claim?" (one prompt per sentence; seconds on a CPU).
//!
//! A sentence with no valid citation has no support to check and scores `None`: it is flagged.
//! Every flag carries its reason ([`Verdict::reason`]), shown by the page and the CLI.

use std::sync::Arc;

use serde::Serialize;

use crate::words::stem;
use super::prompt::support_messages;
use super::segment::units;
use crate::embed::Embedder;
use crate::error::Result;
use crate::generate::Generator;
use crate::types::{cosine, TextKind};

/// How support is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SupportMethod {
    /// Figures, names and negations found in the cited passages, and cosine or word coverage.
    Grounded,
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
            "grounded" => Ok(SupportMethod::Grounded),
            "similarity" => Ok(SupportMethod::Similarity),
            "llm" => Ok(SupportMethod::Llm),
            "off" => Ok(SupportMethod::Off),
            other => Err(crate::error::Error::Invalid(format!("support method `{other}`: use grounded, similarity, llm or off"))),
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

/// A claim's support, judged.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    /// Whether the cited passages back it.
    pub supported: bool,
    /// The method's score (`None`: uncited, or checking off).
    pub score: Option<f32>,
    /// Why it is not supported, in words a reader follows.
    pub reason: Option<String>,
}

/// Scores claims against their cited passages, by one method.
pub enum SupportChecker {
    /// Figures, names and negations checked, then cosine or coverage with this embedder.
    Grounded(Arc<dyn Embedder>),
    /// Embedding cosine with this embedder.
    Similarity(Arc<dyn Embedder>),
    /// Yes/no log-odds from this generator.
    Llm(Arc<dyn Generator>),
    /// No checking.
    Off,
}

impl SupportChecker {
    /// The checker of `method`: the embedder scores for grounded and similarity, the generator
    /// for llm.
    pub fn new(method: SupportMethod, embedder: Arc<dyn Embedder>, generator: &Arc<dyn Generator>) -> SupportChecker {
        match method {
            SupportMethod::Grounded => SupportChecker::Grounded(embedder),
            SupportMethod::Similarity => SupportChecker::Similarity(embedder),
            SupportMethod::Llm => SupportChecker::Llm(generator.clone()),
            SupportMethod::Off => SupportChecker::Off,
        }
    }

    /// The method in use.
    pub fn method(&self) -> SupportMethod {
        match self {
            SupportChecker::Grounded(_) => SupportMethod::Grounded,
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
            SupportChecker::Grounded(e) => {
                for (i, score) in cited.iter().zip(similarity_scores(e.as_ref(), claims, &cited)?) {
                    let c = &claims[*i];
                    out[*i] = Some(score.max(coverage(&c.text, &c.passages)));
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

    /// Each claim's verdict against `floor` (in the method's score), with the reason for a flag.
    /// `question` is what the claims answer: a figure or name the answer repeats from it (to
    /// deny it: "No, not 250 pounds: the cap is GBP 210") is not one the passages must hold.
    pub async fn verdicts(&self, question: &str, claims: &[Claim<'_>], floor: f32) -> Result<Vec<Verdict>> {
        let scores = self.scores(claims).await?;
        Ok(claims
            .iter()
            .zip(scores)
            .map(|(c, score)| {
                if c.passages.is_empty() {
                    return Verdict { supported: false, score, reason: Some("cites no passage".to_string()) };
                }
                let (method, off) = (self.method(), self.method() == SupportMethod::Off);
                if method == SupportMethod::Grounded {
                    if let Some(reason) = ungrounded(question, &c.text, &c.passages) {
                        return Verdict { supported: false, score: Some(0.0), reason: Some(reason) };
                    }
                }
                match score {
                    _ if off => Verdict { supported: true, score, reason: None },
                    Some(x) if x >= floor => Verdict { supported: true, score, reason: None },
                    _ => Verdict {
                        supported: false,
                        score,
                        reason: Some(format!(
                            "no sentence of the passage it cites says this ({} support {} below {floor:.2})",
                            serde_json::to_value(method).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default(),
                            score.map_or("none".to_string(), |x| format!("{x:.2}"))
                        )),
                    },
                }
            })
            .collect())
    }
}

/// Words that negate.
const NEGATIONS: &[&str] = &["not", "no", "never", "cannot", "can't", "don't", "doesn't", "isn't", "aren't", "won't", "none", "nothing", "neither", "nor", "without", "mustn't", "shouldn't", "didn't", "wasn't", "weren't", "haven't", "hasn't"];

/// Words too common to say anything about support.
const COMMON: &[&str] = &[
    "a", "an", "the", "and", "or", "of", "to", "in", "on", "at", "for", "by", "with", "from", "as", "is", "are", "be", "was",
    "were", "been", "it", "its", "this", "that", "these", "those", "you", "your", "can", "may", "must", "should", "will",
    "if", "yes", "no", "not", "do", "does", "did", "has", "have", "had", "i", "we", "they", "he", "she", "there", "which",
    "what", "who", "when", "where", "how", "than", "then", "so", "but", "also", "only", "all", "any", "each", "per",
];

/// Lowercase words (digits kept with their inner `.` and `,`: "1,000", "3.11"), apostrophes kept.
fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let chars: Vec<char> = text.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        let inner_mark = matches!(c, '.' | ',') && i > 0 && chars[i - 1].is_ascii_digit() && chars.get(i + 1).is_some_and(char::is_ascii_digit);
        if c.is_alphanumeric() || c == '\'' || c == '’' || inner_mark {
            word.extend(c.to_lowercase());
        } else if !word.is_empty() {
            out.push(std::mem::take(&mut word).replace('’', "'").trim_matches('\'').replace(',', ""));
        }
    }
    if !word.is_empty() {
        out.push(word.replace('’', "'").trim_matches('\'').replace(',', ""));
    }
    out.retain(|w| !w.is_empty());
    out
}

/// Share of the claim's content words (stemmed) that its cited passages contain.
fn coverage(claim: &str, passages: &[&str]) -> f32 {
    let words: Vec<String> = tokens(claim).into_iter().filter(|w| !COMMON.contains(&w.as_str())).map(|w| stem(&w)).collect();
    if words.is_empty() {
        return 0.0;
    }
    let held: std::collections::HashSet<String> = passages.iter().flat_map(|p| tokens(p)).map(|w| stem(&w)).collect();
    words.iter().filter(|w| held.contains(*w)).count() as f32 / words.len() as f32
}

/// Why `claim` is not grounded in `passages`: a figure or a name it states that neither they nor
/// the question hold, or a negation where they hold none. `None` when grounded.
pub fn ungrounded(question: &str, claim: &str, passages: &[&str]) -> Option<String> {
    let held: std::collections::HashSet<String> = passages.iter().chain(std::iter::once(&question)).flat_map(|p| tokens(p)).collect();
    let words = tokens(claim);
    let figures: Vec<&String> = words.iter().filter(|w| w.chars().any(|c| c.is_ascii_digit()) && !held.contains(*w)).collect();
    if let Some(f) = figures.first() {
        return Some(format!("the figure “{f}” is not in the passage it cites"));
    }
    // Names: capitalised words after the first (the first is capitalised as a sentence opens).
    let mut seen_first = false;
    for raw in claim.split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '-')) {
        let w = raw.trim_matches(['\'', '-']);
        if w.is_empty() {
            continue;
        }
        if !seen_first {
            seen_first = true;
            continue;
        }
        let name = w.chars().next().is_some_and(char::is_uppercase) && w != "I";
        let lower = w.to_lowercase();
        if name && !held.contains(&lower) && !lower.split('-').all(|part| held.contains(part)) {
            return Some(format!("the name “{w}” is not in the passage it cites"));
        }
    }
    // Negation: the claim against the passage sentence it matches best (most content words in
    // common, at least half of the claim's). A leading "No," answers a yes/no question.
    let body: Vec<String> = words.iter().skip(usize::from(words.first().is_some_and(|w| w == "no"))).cloned().collect();
    let content = |ws: &[String]| -> std::collections::HashSet<String> {
        ws.iter().filter(|w| !COMMON.contains(&w.as_str())).map(|w| stem(w)).collect()
    };
    let mine = content(&body);
    let best = passages
        .iter()
        .flat_map(|p| units(p))
        .map(|u| tokens(&u.shown()))
        .map(|ws| (content(&ws).intersection(&mine).count(), ws))
        .max_by_key(|(n, _)| *n);
    if let Some((common, sentence)) = best.filter(|(n, _)| *n >= 2 && 2 * n >= mine.len()) {
        let (claim_negates, source_negates) = (negates(&body), negates(&sentence));
        if claim_negates && !source_negates {
            return Some(format!("it says “not” where the passage sentence it matches ({common} words in common) does not"));
        }
        if source_negates && !claim_negates {
            return Some(format!("it leaves out the “not” of the passage sentence it matches ({common} words in common)"));
        }
    }
    None
}

/// Whether `words` hold a negation ("not only … but" adds, it does not negate).
fn negates(words: &[String]) -> bool {
    words.iter().enumerate().any(|(i, w)| {
        let not_only = w == "not" && words.get(i + 1).is_some_and(|next| next == "only") && words[i..].iter().any(|w| w == "but");
        (NEGATIONS.contains(&w.as_str()) || w.ends_with("n't")) && !not_only
    })
}

/// Cosine of each cited claim to the closest sentence of the passages it cites.
fn similarity_scores(embedder: &dyn Embedder, claims: &[Claim<'_>], cited: &[usize]) -> Result<Vec<f32>> {
    // Every distinct passage unit once (the segmentation the focus and the quotes read), then
    // every claim.
    let mut owned: Vec<String> = Vec::new();
    let mut per_claim: Vec<Vec<usize>> = Vec::new();
    let mut seen = std::collections::HashMap::new();
    for &i in cited {
        let mut mine = Vec::new();
        for passage in &claims[i].passages {
            for unit in units(passage) {
                let s = unit.shown();
                let at = *seen.entry(s.clone()).or_insert_with(|| {
                    owned.push(s);
                    owned.len() - 1
                });
                mine.push(at);
            }
        }
        per_claim.push(mine);
    }
    let pieces: Vec<&str> = owned.iter().map(String::as_str).collect();
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
    fn a_wrapped_list_item_is_one_sentence() {
        // The item's second line holds its verb: matched alone, it hid the item's "not".
        let passage = "## 5 Devices\n\n- Security updates are installed automatically; a device that has not received updates for 21 days is\n  blocked from the network until it is updated.\n- Lost devices are reported.";
        let claim = "If your laptop hasn't had updates for 21 days, it is blocked from the network until it is updated.";
        assert_eq!(ungrounded("What if my laptop misses updates?", claim, &[passage]), None);
        let falsified = "A device that has received updates for 21 days is blocked from the network until it is updated.";
        assert!(ungrounded("What if my laptop misses updates?", falsified, &[passage]).is_some_and(|r| r.contains("leaves out")));
    }

    #[test]
    fn not_only_is_no_negation() {
        let passage = "If you want to handle not only ASCII characters but also all UTF-8 encoded characters while keeping the old C behaviour, use the C.UTF-8 locale on Debian.";
        let claim = "Use the C.UTF-8 locale on Debian to handle all UTF-8 encoded characters while keeping the old C behaviour.";
        assert_eq!(ungrounded("Which locale?", claim, &[passage]), None);
        let negated = "Do not use the C.UTF-8 locale on Debian to handle all UTF-8 encoded characters while keeping the old C behaviour.";
        assert!(ungrounded("Which locale?", negated, &[passage]).is_some());
    }

    #[test]
    fn off_scores_nothing() {
        let claims = vec![Claim { text: "x".into(), passages: vec!["x"] }];
        assert_eq!(crate::generate::block_on(SupportChecker::Off.scores(&claims)).unwrap(), vec![None]);
    }
}
