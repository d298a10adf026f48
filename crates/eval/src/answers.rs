//! Answer evaluation (`ragbox eval --answers`): BEIR claims asked as questions through the whole
//! answer path (retrieval, refusal floor, generation, citation check, support check), and
//! out-of-domain questions that must be refused.
//!
//! Reports citation validity (after the check, and the share of citations the model made up),
//! citation precision (cited documents relevant per qrels), the share of sentences flagged
//! unsupported, refusal correctness on both sides, time to first token, tokens/s and the whole
//! answer's time; and it compares the support-check methods on pairs whose answer is known: a
//! claim with a document judged relevant to it (supported) against the same claim with the
//! highest-ranked document judged not relevant (a hard negative).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

use ragbox_core::answer::cite;
use ragbox_core::answer::support::{Claim, SupportChecker, SupportMethod};
use ragbox_core::answer::{Answer, AnswerOptions, Answerer};
use ragbox_core::embed::Embedder;
use ragbox_core::error::{Error, Result};
use crate::{beir, AnswerModels};
use crate::metrics::percentile;
use crate::run::{load_questions, Progress};
use ragbox_core::generate::{block_on, Discard, Generator};
use ragbox_core::ingest::{ingest, IngestOptions};
use ragbox_core::retrieve::{RetrieveOptions, Retriever};
use ragbox_core::store::{Store, VectorOptions};

/// What to evaluate.
pub struct AnswerPlan {
    /// BEIR folder.
    pub data: PathBuf,
    /// Qrels split.
    pub split: String,
    /// Scratch folder (shared with the retrieval evaluation: its store is reused).
    pub scratch: PathBuf,
    /// Ingest settings; `tenant` names the scratch tenant.
    pub ingest: IngestOptions,
    /// Retrieval settings, floor included.
    pub retrieve: RetrieveOptions,
    /// Answer settings.
    pub answer: AnswerOptions,
    /// The support method answers are flagged with.
    pub support: SupportMethod,
    /// In-domain claims asked (the first N of the split).
    pub limit: usize,
    /// Out-of-domain questions (JSON lines with `question`).
    pub ood: Option<PathBuf>,
    /// Out-of-domain questions asked (the first N).
    pub ood_limit: usize,
    /// Claims whose (relevant, hard-negative) pairs compare the support methods (0: skip).
    pub support_pairs: usize,
}

/// One support method's ability to tell supporting passages from hard negatives.
#[derive(Debug, Clone, Serialize)]
pub struct SupportComparison {
    /// The method.
    pub method: SupportMethod,
    /// Pairs scored (half positive).
    pub pairs: usize,
    /// Area under the ROC curve.
    pub auc: f64,
    /// Accuracy at the best threshold.
    pub accuracy: f64,
    /// That threshold (the support floor it suggests).
    pub threshold: f64,
    /// Milliseconds per scored pair.
    pub ms_per_pair: f64,
}

/// Everything `eval --answers` reports.
#[derive(Debug, Clone, Serialize)]
pub struct AnswerReport {
    /// Generator.
    pub model: String,
    /// Support method of the answers.
    pub support: SupportMethod,
    /// In-domain claims asked.
    pub in_domain: usize,
    /// Of those, refused by the floor (no generator call).
    pub in_domain_refused_floor: usize,
    /// Of those, answered "the passages do not answer".
    pub in_domain_declined: usize,
    /// Answers generated in domain.
    pub answered: usize,
    /// Citation markers in the final answers that name a passage given and map to its chunk and
    /// document (read back from the text) / all markers left in them.
    pub citation_validity: f64,
    /// Citations the model made up (ids it was not given) / all citations it wrote.
    pub made_up_citation_rate: f64,
    /// Answers with at least one valid citation / answers.
    pub answers_with_citation: f64,
    /// Valid citations whose document is judged relevant / valid citations.
    pub citation_precision: f64,
    /// Sentences flagged unsupported / sentences, over answers.
    pub unsupported_sentence_share: f64,
    /// Out-of-domain questions asked.
    pub out_of_domain: usize,
    /// Of those, refused (by the floor or by the model).
    pub out_of_domain_refused: usize,
    /// Of those refusals, by the floor (no generator call).
    pub out_of_domain_refused_floor: usize,
    /// Time to first token, ms (p50, p95), over generated answers.
    pub first_token_ms: [f64; 2],
    /// Whole answer, question to last sentence checked, ms (p50, p95).
    pub answer_ms: [f64; 2],
    /// Decoding speed, tokens/s (p50).
    pub tokens_per_second: f64,
    /// Support methods compared on known pairs.
    pub support_methods: Vec<SupportComparison>,
    /// Every in-domain answer, for inspection.
    pub answers: Vec<Answer>,
}

/// A claim as a question: "Is it true that …?".
pub fn claim_question(claim: &str) -> String {
    let c = claim.trim().trim_end_matches('.');
    let mut chars = c.chars();
    match chars.next() {
        Some(first) => {
            let lower: String = if chars.clone().next().is_some_and(char::is_uppercase) {
                first.to_string() // an acronym keeps its case
            } else {
                first.to_lowercase().collect()
            };
            format!("Is it true that {lower}{}?", chars.as_str())
        }
        None => String::new(),
    }
}

/// Area under the ROC curve of scores for positives vs negatives (ties count half).
pub fn auc(positives: &[f32], negatives: &[f32]) -> f64 {
    if positives.is_empty() || negatives.is_empty() {
        return 0.0;
    }
    let mut wins = 0.0;
    for p in positives {
        for n in negatives {
            wins += if p > n {
                1.0
            } else if p == n {
                0.5
            } else {
                0.0
            };
        }
    }
    wins / (positives.len() * negatives.len()) as f64
}

/// The threshold with the best accuracy (score >= threshold: supported), and that accuracy.
pub fn best_threshold(positives: &[f32], negatives: &[f32]) -> (f64, f64) {
    let mut candidates: Vec<f32> = positives.iter().chain(negatives).copied().collect();
    candidates.sort_by(f32::total_cmp);
    let total = (positives.len() + negatives.len()).max(1) as f64;
    let mut best = (f64::NEG_INFINITY, 0.0);
    for t in candidates {
        let right = positives.iter().filter(|&&p| p >= t).count() + negatives.iter().filter(|&&n| n < t).count();
        let acc = right as f64 / total;
        if acc > best.1 {
            best = (f64::from(t), acc);
        }
    }
    best
}

fn p(sorted: &mut [f64], q: f64) -> f64 {
    sorted.sort_by(f64::total_cmp);
    percentile(sorted, q)
}

/// Runs the plan with `models` (the embedder is the index's model).
pub fn run(plan: &AnswerPlan, models: &AnswerModels, progress: Progress<'_>) -> Result<AnswerReport> {
    let AnswerModels { embedder, generator, reranker } = models.clone();
    let set = beir::load(&plan.data, &plan.split)?;
    let docs_dir = plan.scratch.join("docs");
    beir::write_documents(&set.corpus, &docs_dir)?;
    let store = Store::open(&plan.scratch.join("store"), VectorOptions::default())?;
    progress(&format!("ingest: tenant {}", plan.ingest.tenant));
    let report = ingest(&store, &embedder, &docs_dir, &plan.ingest, &mut |_| {})?;
    if !report.skipped.is_empty() {
        return Err(Error::Invalid(format!("{} corpus documents were skipped", report.skipped.len())));
    }
    let tenant = store.catalog().require_tenant(&plan.ingest.tenant)?;
    let retriever = Retriever::new(&store, &tenant, Some(embedder.clone()), reranker, plan.retrieve.clone())?;
    let answerer = Answerer::over(&retriever, generator.clone(), plan.support, plan.answer.clone(), || Ok(embedder.clone()))?;
    let doc_of = |path: &Path| beir::doc_id_for_path(path).unwrap_or_default();

    let mut out = AnswerReport {
        model: generator.model_id().to_string(),
        support: plan.support,
        in_domain: 0,
        in_domain_refused_floor: 0,
        in_domain_declined: 0,
        answered: 0,
        citation_validity: 0.0,
        made_up_citation_rate: 0.0,
        answers_with_citation: 0.0,
        citation_precision: 0.0,
        unsupported_sentence_share: 0.0,
        out_of_domain: 0,
        out_of_domain_refused: 0,
        out_of_domain_refused_floor: 0,
        first_token_ms: [0.0; 2],
        answer_ms: [0.0; 2],
        tokens_per_second: 0.0,
        support_methods: Vec::new(),
        answers: Vec::new(),
    };
    let (mut markers, mut valid, mut cited, mut made_up, mut relevant, mut with_citation, mut sentences, mut flagged) = (0, 0, 0, 0, 0, 0, 0, 0);
    let (mut ttft, mut total, mut speed) = (Vec::new(), Vec::new(), Vec::new());
    let mut record = |a: &Answer, total_ms: f64| {
        if a.model.is_some() {
            ttft.push(a.timings.first_token_ms);
            total.push(total_ms);
            speed.push(a.timings.tokens_per_second);
        }
    };

    for (i, (qid, claim)) in set.queries.iter().take(plan.limit).enumerate() {
        let question = claim_question(claim);
        let t = std::time::Instant::now();
        let retrieval = retriever.retrieve(&question)?;
        let a = block_on(answerer.answer(&question, &question, &retrieval, &mut Discard))?;
        let total_ms = t.elapsed().as_secs_f64() * 1e3;
        record(&a, total_ms);
        out.in_domain += 1;
        match a.refusal {
            Some(ragbox_core::answer::Refusal::NoGoodSource) => out.in_domain_refused_floor += 1,
            Some(
                ragbox_core::answer::Refusal::PassagesDoNotAnswer
                | ragbox_core::answer::Refusal::NoAnswerWritten
                | ragbox_core::answer::Refusal::Unsupported
                | ragbox_core::answer::Refusal::DocumentsDoNotSay,
            ) => out.in_domain_declined += 1,
            None => {
                out.answered += 1;
                let (ok, written) = checked_citations(&a);
                valid += ok;
                markers += written;
                cited += a.citations.len();
                made_up += a.invalid_citations.len();
                with_citation += usize::from(!a.citations.is_empty());
                let judged = &set.qrels[qid];
                relevant += a.citations.iter().filter(|c| judged.get(&doc_of(&c.document)).is_some_and(|&g| g > 0)).count();
                sentences += a.sentences.len();
                flagged += a.sentences.iter().filter(|s| !s.supported).count();
            }
        }
        progress(&format!(
            "answer {}/{}: {} · {} citations ({} made up) · {:.1} s",
            i + 1,
            plan.limit.min(set.queries.len()),
            match a.refusal {
                Some(r) => format!("{r:?}"),
                None => "answered".into(),
            },
            a.citations.len(),
            a.invalid_citations.len(),
            total_ms / 1e3
        ));
        out.answers.push(a);
    }
    if let Some(ood) = &plan.ood {
        for q in load_questions(ood)?.iter().take(plan.ood_limit) {
            let t = std::time::Instant::now();
            let retrieval = retriever.retrieve(q)?;
            let a = block_on(answerer.answer(q, q, &retrieval, &mut Discard))?;
            record(&a, t.elapsed().as_secs_f64() * 1e3);
            out.out_of_domain += 1;
            out.out_of_domain_refused += usize::from(a.refused);
            out.out_of_domain_refused_floor += usize::from(a.refusal == Some(ragbox_core::answer::Refusal::NoGoodSource));
        }
        progress(&format!("out of domain: {}/{} refused", out.out_of_domain_refused, out.out_of_domain));
    }
    let ratio = |a: usize, b: usize| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    out.citation_validity = if markers == 0 { 1.0 } else { ratio(valid, markers) };
    out.made_up_citation_rate = ratio(made_up, markers + made_up);
    out.answers_with_citation = ratio(with_citation, out.answered);
    out.citation_precision = ratio(relevant, cited);
    out.unsupported_sentence_share = ratio(flagged, sentences);
    out.first_token_ms = [p(&mut ttft, 50.0), p(&mut ttft, 95.0)];
    out.answer_ms = [p(&mut total, 50.0), p(&mut total, 95.0)];
    out.tokens_per_second = p(&mut speed, 50.0);

    if plan.support_pairs > 0 {
        out.support_methods = compare_support(plan, &set, &retriever, embedder, generator, progress)?;
    }
    Ok(out)
}

/// Checks a final answer's citations from its text, apart from the citation check that wrote
/// it: every marker left in the text is read back, and it counts as valid only when it names a
/// passage the generator was given and its citation maps to that passage's chunk and document.
/// Returns (valid markers, all markers).
pub(crate) fn checked_citations(a: &Answer) -> (usize, usize) {
    // Parsed with no valid ids, every marker in the text comes back as written. Quoted evidence's
    // brackets are the passage's words ("[1, 2, 3]" in a code example), not citations.
    // The same holds for the verbatim evidence of an evidence-first answer.
    let mut text = a.answer.clone();
    if let Some(d) = &a.decision {
        for e in &d.evidence {
            let words = e.text.trim_end().trim_end_matches(['.', '!', '?', '…', ':', ';', ',']).trim_end();
            text = text.replacen(words, "", 1);
        }
    }
    let written = cite::parse_answer(&text, &[]).invalid;
    let valid = written
        .iter()
        .filter(|w| {
            w.parse::<usize>().ok().is_some_and(|id| {
                let source = a.sources.iter().find(|s| s.id == id);
                let citation = a.citations.iter().find(|c| c.id == id);
                matches!((source, citation), (Some(s), Some(c)) if c.chunk == s.chunk && c.document == s.document)
            })
        })
        .count();
    (valid, written.len())
}

/// Scores (claim, relevant document) and (claim, best-ranked non-relevant document) pairs with
/// each support method.
fn compare_support(
    plan: &AnswerPlan,
    set: &beir::BeirSet,
    retriever: &Retriever<'_>,
    embedder: Arc<dyn Embedder>,
    generator: Arc<dyn Generator>,
    progress: Progress<'_>,
) -> Result<Vec<SupportComparison>> {
    let mut pairs: Vec<(String, String, bool)> = Vec::new();
    for (qid, claim) in set.queries.iter() {
        if pairs.len() >= plan.support_pairs * 2 {
            break;
        }
        let r = retriever.retrieve(claim)?;
        let judged = &set.qrels[qid];
        let is_relevant =
            |h: &ragbox_core::retrieve::Hit| beir::doc_id_for_path(&h.chunk.path).and_then(|d| judged.get(&d).copied()).is_some_and(|g| g > 0);
        let positive = r.hits.iter().find(|h| is_relevant(h));
        let negative = r.hits.iter().find(|h| !is_relevant(h));
        if let (Some(p), Some(n)) = (positive, negative) {
            pairs.push((claim.clone(), p.chunk.text.clone(), true));
            pairs.push((claim.clone(), n.chunk.text.clone(), false));
        }
    }
    progress(&format!("support methods: {} pairs", pairs.len()));
    let claims: Vec<Claim> = pairs.iter().map(|(c, p, _)| Claim { text: c.clone(), passages: vec![p.as_str()] }).collect();
    let mut out = Vec::new();
    for checker in [SupportChecker::Similarity(embedder), SupportChecker::Llm(generator)] {
        let t = std::time::Instant::now();
        let scores = block_on(checker.scores(&claims))?;
        let ms = t.elapsed().as_secs_f64() * 1e3 / pairs.len().max(1) as f64;
        let mut by: HashMap<bool, Vec<f32>> = HashMap::new();
        for ((_, _, label), s) in pairs.iter().zip(scores) {
            by.entry(*label).or_default().push(s.unwrap_or(f32::NEG_INFINITY));
        }
        let (pos, neg) = (by.remove(&true).unwrap_or_default(), by.remove(&false).unwrap_or_default());
        let (threshold, accuracy) = best_threshold(&pos, &neg);
        let c = SupportComparison { method: checker.method(), pairs: pairs.len(), auc: auc(&pos, &neg), accuracy, threshold, ms_per_pair: ms };
        progress(&format!("  {:?}: AUC {:.3}, accuracy {:.3} at {:.3}, {:.0} ms/pair", c.method, c.auc, c.accuracy, c.threshold, c.ms_per_pair));
        out.push(c);
    }
    Ok(out)
}

/// The report as markdown.
pub fn markdown(r: &AnswerReport, command: &str, machine: &str) -> String {
    let mut s = String::new();
    s.push_str(&format!("\n### Answers: {} ({})\n\n`{command}` on {machine}\n\n", r.model, machine));
    s.push_str("| measure | value |\n|---|---|\n");
    let rows = [
        ("in-domain claims asked", r.in_domain.to_string()),
        ("refused by the floor (wrong: in domain)", r.in_domain_refused_floor.to_string()),
        ("declined by the model", r.in_domain_declined.to_string()),
        ("answered", r.answered.to_string()),
        ("citation validity (after the check)", format!("{:.1}%", r.citation_validity * 100.0)),
        ("citations the model made up (removed)", format!("{:.1}%", r.made_up_citation_rate * 100.0)),
        ("answers with a valid citation", format!("{:.1}%", r.answers_with_citation * 100.0)),
        ("citation precision (cited document relevant)", format!("{:.1}%", r.citation_precision * 100.0)),
        ("sentences flagged unsupported", format!("{:.1}%", r.unsupported_sentence_share * 100.0)),
        ("out-of-domain questions refused", format!("{}/{}", r.out_of_domain_refused, r.out_of_domain)),
        ("  of which by the floor (no LLM call)", r.out_of_domain_refused_floor.to_string()),
        ("first token p50 / p95", format!("{:.2} s / {:.2} s", r.first_token_ms[0] / 1e3, r.first_token_ms[1] / 1e3)),
        ("whole answer p50 / p95", format!("{:.2} s / {:.2} s", r.answer_ms[0] / 1e3, r.answer_ms[1] / 1e3)),
        ("decoding speed p50", format!("{:.1} tokens/s", r.tokens_per_second)),
    ];
    for (k, v) in rows {
        s.push_str(&format!("| {k} | {v} |\n"));
    }
    if !r.support_methods.is_empty() {
        s.push_str("\n| support method | pairs | AUC | accuracy | threshold | ms/pair |\n|---|---|---|---|---|---|\n");
        for c in &r.support_methods {
            s.push_str(&format!(
                "| {:?} | {} | {:.3} | {:.3} | {:.3} | {:.0} |\n",
                c.method, c.pairs, c.auc, c.accuracy, c.threshold, c.ms_per_pair
            ));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_become_questions() {
        assert_eq!(claim_question("Vitamin D lowers risk."), "Is it true that vitamin D lowers risk?");
        assert_eq!(claim_question("DNA repair is slow"), "Is it true that DNA repair is slow?");
    }

    fn answer(text: &str, cited: &[(usize, u64)]) -> Answer {
        use ragbox_core::answer::{Citation, Source};
        use ragbox_core::types::{ChunkId, DocId, Lines, Span};
        let source = |id: usize| Source {
            id,
            chunk: ChunkId(id as u64),
            matched_chunk: ChunkId(id as u64),
            matched_span: Span { start: 0, end: 1 },
            doc: DocId(id as u64),
            document: PathBuf::from(format!("/d/{id}.txt")),
            title: String::new(),
            section_path: Vec::new(),
            span: Span { start: 0, end: 1 },
            page: None,
            lines: Lines { first: 1, last: 1 },
            score: 1.0,
            text: String::new(),
            shown: None,
        };
        let citation = |&(id, chunk): &(usize, u64)| Citation {
            id,
            chunk: ChunkId(chunk),
            document: PathBuf::from(format!("/d/{chunk}.txt")),
            title: String::new(),
            section_path: Vec::new(),
            span: Span { start: 0, end: 1 },
            page: None,
        };
        Answer {
            answer_id: None,
            question: String::new(),
            standalone: String::new(),
            answer: text.into(),
            outcome: ragbox_core::answer::evidence::AnswerOutcome::Answered,
            decision: None,
            verdict: None,
            verdict_log_odds: None,
            citations: cited.iter().map(citation).collect(),
            invalid_citations: Vec::new(),
            sentences: Vec::new(),
            refused: false,
            refusal: None,
            closest: Vec::new(),
            sources: vec![source(1), source(2)],
            model: Some("m".into()),
            written_by: None,
            support_method: SupportMethod::Off,
            timings: Default::default(),
            hit_token_cap: false,
            cut_mid_sentence: false,
            second_try: false,
            prompts: Vec::new(),
        }
    }

    #[test]
    fn citation_validity_is_read_back_from_the_answer_text() {
        assert_eq!(checked_citations(&answer("A [1]. B [2][1].", &[(1, 1), (2, 2)])), (3, 3));
        // A marker for a passage never given, one with no citation, one mapped to the wrong chunk.
        assert_eq!(checked_citations(&answer("A [3]. B [2].", &[(3, 3)])), (0, 2));
        assert_eq!(checked_citations(&answer("A [1]. B [2].", &[(1, 1), (2, 1)])), (1, 2));
        assert_eq!(checked_citations(&answer("No markers.", &[])), (0, 0));
        // Quoted evidence's brackets are its passage's words.
        use ragbox_core::answer::evidence::{AnswerOutcome, Asks, DecidedBy, Decision, EvidenceUnit, Signals};
        let text = "x += [1, 2, 3] extends x.";
        let mut quoted = answer("x += [1, 2, 3] extends x [1].", &[(1, 1)]);
        let signals = Signals { best_logit: 5.0, asks: Asks::Other };
        let unit = EvidenceUnit { passage: 1, index: 0, text: text.into(), score: 0.9, logit: 5.0, unit: Default::default() };
        quoted.decision = Some(Decision { outcome: AnswerOutcome::Answered, score: 0.9, floor: 0.5, by: DecidedBy::Reader, signals, evidence: vec![unit], ranked: Vec::new(), ms: 1.0 });
        assert_eq!(checked_citations(&quoted), (1, 1));
    }

    #[test]
    fn auc_and_threshold_separate_perfectly_ordered_scores() {
        assert_eq!(auc(&[0.9, 0.8], &[0.1, 0.2]), 1.0);
        assert_eq!(auc(&[0.5], &[0.5]), 0.5);
        let (t, acc) = best_threshold(&[0.9, 0.8], &[0.1, 0.2]);
        assert_eq!(acc, 1.0);
        assert!(t > 0.2 && t <= f64::from(0.8f32), "{t}");
    }
}
