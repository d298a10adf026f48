//! Reference-answer evaluation (`ragbox eval --qa FILE --corpus DIR`): questions with a short
//! reference answer and the evidence sentence (`tests/data/corpus-questions.jsonl`), asked through
//! the whole answer path over a folder of documents.
//!
//! Built to catch an answer that "copies passage 1 until the token cap": it scores the answer's
//! words against the reference (SQuAD-style token F1, token recall and exact match), whether the
//! passage holding the evidence was given and cited, citation validity (read back from the text),
//! the share of sentences flagged unsupported, the share of the answer copied verbatim from a
//! passage (runs of [`COPY_RUN`] words or more), answers that hit the token cap, refusals on both
//! sides, and time. One [`QaRow`] per question for inspection.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use ragbox_core::answer::cite::strip_markers;
use ragbox_core::answer::support::SupportMethod;
use ragbox_core::answer::focus::FocusScorer;
use ragbox_core::answer::{unasked, Answer, AnswerOptions, Answerer, Refusal};
use ragbox_core::embed::Embedder;
use ragbox_core::error::{Error, Result};
use crate::answers::checked_citations;
use crate::metrics::percentile;
use crate::run::Progress;
use ragbox_core::generate::{block_on, Discard, Generator};
use ragbox_core::ingest::{ingest, IngestOptions};
use ragbox_core::rerank::Reranker;
use ragbox_core::retrieve::{RetrieveOptions, Retrieval, Retriever};
use ragbox_core::store::{Store, VectorOptions};

/// Words in a row, copied verbatim from a passage, that count as copying.
pub const COPY_RUN: usize = 8;

/// One question of the set (extra fields, such as `note`, are ignored).
#[derive(Debug, Clone, Deserialize)]
pub struct QaQuestion {
    /// The question.
    pub question: String,
    /// A short reference answer; `null` when the documents do not answer it.
    pub answer: Option<String>,
    /// The document (relative to the corpus folder) that answers it.
    pub file: Option<String>,
    /// A sentence (or table row) of that document that holds the answer.
    pub evidence: Option<String>,
    /// False for questions the documents do not answer (they must be refused).
    pub answerable: bool,
    /// The half it belongs to, `dev` or `test` (tune on dev, report test); none: both.
    #[serde(default)]
    pub split: Option<String>,
    /// What kind of question it is (`fact`, `yes-no`, `how`, `why`, `unanswerable`,
    /// `near-miss`), when the set says.
    #[serde(default)]
    pub kind: Option<String>,
}

/// What to evaluate.
pub struct QaPlan {
    /// The collection's name in the report (the questions file's stem).
    pub collection: String,
    /// The questions (JSON lines of [`QaQuestion`]).
    pub questions: PathBuf,
    /// Only the questions of this half (`dev`, `test`); `None`: all of them.
    pub split: Option<String>,
    /// The documents they are about, and the settings they are asked with.
    pub setup: QaSetup,
}

/// The documents a question-answering evaluation asks over and how it asks: the part of the plan
/// `eval --qa` and `eval --conversations` ([`super::conversations`]) share.
pub struct QaSetup {
    /// The documents.
    pub corpus: PathBuf,
    /// Scratch folder for the store (reused: ingest is incremental).
    pub scratch: PathBuf,
    /// Ingest settings; `tenant` names the scratch tenant.
    pub ingest: IngestOptions,
    /// Retrieval settings, floor included.
    pub retrieve: RetrieveOptions,
    /// Answer settings.
    pub answer: AnswerOptions,
    /// The support method answers are flagged with.
    pub support: SupportMethod,
}

impl QaSetup {
    /// Ingests the documents into `store` (incremental), then their tenant's retriever.
    pub fn retriever<'s>(
        &self,
        store: &'s Store,
        embedder: &Arc<dyn Embedder>,
        reranker: Option<Arc<dyn Reranker>>,
        progress: Progress<'_>,
    ) -> Result<Retriever<'s>> {
        progress(&format!("ingest {} into tenant {}", self.corpus.display(), self.ingest.tenant));
        ingest(store, embedder, &self.corpus, &self.ingest, &mut |_| {})?;
        let tenant = store.catalog().require_tenant(&self.ingest.tenant)?;
        Retriever::new(store, &tenant, Some(embedder.clone()), reranker, self.retrieve.clone())
    }

    /// An answerer over `retriever` that writes with `generator` and focuses with the models
    /// retrieval ranks with.
    pub fn answerer(&self, retriever: &Retriever<'_>, embedder: &Arc<dyn Embedder>, generator: &Arc<dyn Generator>) -> Result<Answerer> {
        Answerer::over(retriever, generator.clone(), self.support, self.answer.clone(), || Ok(embedder.clone()))
    }

    /// [`QaSetup::retriever`] and [`QaSetup::answerer`].
    pub fn answer_path<'s>(
        &self,
        store: &'s Store,
        embedder: &Arc<dyn Embedder>,
        generator: &Arc<dyn Generator>,
        reranker: Option<Arc<dyn Reranker>>,
        progress: Progress<'_>,
    ) -> Result<(Retriever<'s>, Answerer)> {
        let retriever = self.retriever(store, embedder, reranker, progress)?;
        let answerer = self.answerer(&retriever, embedder, generator)?;
        Ok((retriever, answerer))
    }
}

/// One question's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct QaRow {
    /// The question.
    pub question: String,
    /// The reference answer.
    pub reference: Option<String>,
    /// Whether the documents answer it.
    pub answerable: bool,
    /// Its kind, as the set gives it (`near-miss`: an unanswerable question next to what the
    /// documents say).
    pub kind: Option<String>,
    /// The answer text.
    pub answer: String,
    /// Why it was refused, if it was.
    pub refusal: Option<Refusal>,
    /// Answered, the documents do not say, or no good source.
    pub outcome: ragbox_core::answer::evidence::AnswerOutcome,
    /// The answerability decision, when the answer was evidence-first (or would have been:
    /// `--prompts-only`): a decision floor or weights can be tried on a run's rows.
    pub decision: Option<ragbox_core::answer::evidence::Decision>,
    /// A yes/no question's verdict, and the log-odds it came from.
    pub verdict: Option<String>,
    /// The generator's log-odds of "Yes" over "No" (a verdict threshold can be tried on the rows).
    pub verdict_log_odds: Option<f32>,
    /// The answer opens with a citation marker or ends mid-sentence (an answer, not a refusal).
    pub fragment: bool,
    /// Token F1 against the reference (answerable questions).
    pub f1: f64,
    /// Share of the reference's tokens found in the answer.
    pub recall: f64,
    /// The normalised answer equals the normalised reference.
    pub exact: bool,
    /// The collection it belongs to.
    pub collection: String,
    /// Where the evidence went: the stage of the answer path that lost it, or `shown`.
    pub evidence_stage: EvidenceStage,
    /// Retrieval's best evidence score (what the refusal floor compares), and the best cosine
    /// similarity of a candidate: a floor can be tried on a run's rows without asking again.
    pub best_evidence: Option<f32>,
    /// The best cosine similarity of a candidate to the question.
    pub best_similarity: Option<f32>,
    /// A passage given to the model held the evidence.
    pub evidence_given: bool,
    /// A valid citation names a passage that holds the evidence.
    pub evidence_cited: bool,
    /// Valid citation markers / markers in the text.
    pub citations: [usize; 2],
    /// Sentences flagged unsupported / sentences.
    pub unsupported: [usize; 2],
    /// Each sentence with the texts of the passages it cites (the support check's input) and
    /// its flag: material for a labelled support set.
    pub sentences: Vec<SentenceRow>,
    /// Share of the answer's words inside verbatim runs of [`COPY_RUN`]+ words from a passage.
    pub copied_share: f64,
    /// The answer stopped at the token cap.
    pub hit_token_cap: bool,
    /// What the model read of each passage given (the focused sentences, or the whole passage),
    /// or of the closest material when it declined.
    pub read: Vec<String>,
    /// Tokens of the prompt (0 when no model was called).
    pub prompt_tokens: usize,
    /// Milliseconds to the first token (0 when no model was called).
    pub first_token_ms: f64,
    /// Milliseconds from the question to the checked answer.
    pub total_ms: f64,
}

/// One answer sentence as the support check saw it.
#[derive(Debug, Clone, Serialize)]
pub struct SentenceRow {
    /// The sentence, markers included.
    pub text: String,
    /// The texts of the passages it cites.
    pub passages: Vec<String>,
    /// Its flag.
    pub supported: bool,
    /// Its support score.
    pub support: Option<f32>,
}

/// How far a question's evidence got along the answer path. Retrieval returns `top_k` passages;
/// the first `answer.passages` are given, each cut to `answer.passage_chars`; with focus the
/// model reads only their sentences closest to the question. The first stage that lost the
/// evidence sentence is where it went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EvidenceStage {
    /// No evidence to look for (an unanswerable question).
    None,
    /// Retrieval refused the question (nothing cleared the floor), evidence in its list or not.
    Refused,
    /// Not in any passage retrieval returned.
    NotRetrieved,
    /// Retrieved, but below the passages given to the model.
    BelowPassages,
    /// In a given passage, but past its character budget.
    CutByBudget,
    /// In a given passage, but its sentence was not among the focused ones.
    DroppedByFocus,
    /// The model read it.
    Shown,
}

/// Everything `eval --qa` reports.
#[derive(Debug, Clone, Serialize)]
pub struct QaReport {
    /// The collection (or `all`).
    pub collection: String,
    /// Generator.
    pub model: String,
    /// Answer settings used.
    pub passages: usize,
    /// Most characters per passage.
    pub passage_chars: usize,
    /// The token cap.
    pub max_tokens: usize,
    /// Sentences of the passages the model read (0: whole passages).
    pub focus: usize,
    /// Median prompt tokens of the answers the model wrote.
    pub prompt_tokens_p50: f64,
    /// Median characters of passage text the model read (of every question not refused by
    /// retrieval): what the focus and the budget give it.
    pub read_chars_p50: f64,
    /// Answerable questions asked.
    pub answerable: usize,
    /// Of those, refused (by the floor or the model): misses.
    pub answerable_refused: usize,
    /// Answers that open with a citation marker or end mid-sentence.
    pub fragments: usize,
    /// Near misses asked (unanswerable questions right next to what the documents say).
    pub near_misses: usize,
    /// Of those, refused (correct).
    pub near_misses_refused: usize,
    /// Mean token F1 over answerable questions (a refusal scores 0).
    pub f1: f64,
    /// Mean token recall over answerable questions.
    pub recall: f64,
    /// Exact matches / answerable.
    pub exact: f64,
    /// Answerable questions whose answer reaches at least half of the reference's tokens.
    pub reached: f64,
    /// Answerable questions whose evidence retrieval returned (its `top_k`).
    pub evidence_retrieved: f64,
    /// Of those, the share whose evidence sentence the model read.
    pub evidence_shown_of_retrieved: f64,
    /// Answerable questions per [`EvidenceStage`] where their evidence stopped.
    pub evidence_lost: std::collections::BTreeMap<String, usize>,
    /// Answerable questions whose evidence passage was given to the model.
    pub evidence_given: f64,
    /// Answerable questions whose evidence passage was cited.
    pub evidence_cited: f64,
    /// Answerable questions both reached and evidence-cited: the headline.
    pub reached_and_cited: f64,
    /// Valid citation markers / all markers, over answers.
    pub citation_validity: f64,
    /// Sentences flagged unsupported / sentences.
    pub unsupported_share: f64,
    /// Mean share of answers copied verbatim in long runs.
    pub copied_share: f64,
    /// Answers that hit the token cap / answers generated.
    pub hit_token_cap: f64,
    /// Unanswerable questions asked.
    pub unanswerable: usize,
    /// Of those, refused (correct).
    pub unanswerable_refused: usize,
    /// Time to first token, ms (p50, p95).
    pub first_token_ms: [f64; 2],
    /// Whole answer, ms (p50, p95).
    pub total_ms: [f64; 2],
    /// Every question.
    pub rows: Vec<QaRow>,
}

/// Reads the questions of `split` (all when `None`; a question without a split is in both).
pub fn load(path: &Path, split: Option<&str>) -> Result<Vec<QaQuestion>> {
    let text = std::fs::read_to_string(path).map_err(Error::path(path))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let q: QaQuestion = serde_json::from_str(line)
            .map_err(|e| Error::Invalid(format!("{}:{}: not a question line: {e}", path.display(), i + 1)))?;
        if q.answerable && (q.answer.is_none() || q.evidence.is_none()) {
            return Err(Error::Invalid(format!("{}:{}: an answerable question needs `answer` and `evidence`", path.display(), i + 1)));
        }
        if let Some(other) = q.split.as_deref().filter(|s| !matches!(*s, "dev" | "test")) {
            return Err(Error::Invalid(format!("{}:{}: split `{other}` is neither dev nor test", path.display(), i + 1)));
        }
        if split.is_none_or(|want| q.split.as_deref().is_none_or(|s| s == want)) {
            out.push(q);
        }
    }
    if out.is_empty() {
        let half = split.map(|s| format!(" in its {s} half")).unwrap_or_default();
        return Err(Error::Invalid(format!("{} holds no questions{half}", path.display())));
    }
    Ok(out)
}

/// SQuAD's answer normalisation: lower case, punctuation and articles dropped, words.
pub fn words(text: &str) -> Vec<String> {
    text.to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty() && !matches!(*w, "a" | "an" | "the"))
        .map(str::to_string)
        .collect()
}

/// Token F1 and recall of `answer` against `reference` (bags of words, SQuAD's definition).
pub fn f1_recall(answer: &[String], reference: &[String]) -> (f64, f64) {
    let mut pool: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for w in reference {
        *pool.entry(w).or_default() += 1;
    }
    let mut common = 0usize;
    for w in answer {
        if let Some(n) = pool.get_mut(w.as_str()).filter(|n| **n > 0) {
            *n -= 1;
            common += 1;
        }
    }
    if common == 0 {
        return (0.0, 0.0);
    }
    let precision = common as f64 / answer.len() as f64;
    let recall = common as f64 / reference.len() as f64;
    (2.0 * precision * recall / (precision + recall), recall)
}

/// Share of `answer`'s words that lie in a run of at least `run` consecutive words found, in the
/// same order, in one of `passages`.
pub fn copied_share(answer: &[String], passages: &[Vec<String>], run: usize) -> f64 {
    if answer.is_empty() {
        return 0.0;
    }
    let mut covered = vec![false; answer.len()];
    for p in passages {
        for i in 0..answer.len() {
            for j in 0..p.len() {
                let len = answer[i..].iter().zip(&p[j..]).take_while(|(a, b)| a == b).count();
                if len >= run {
                    covered[i..i + len].iter_mut().for_each(|c| *c = true);
                }
            }
        }
    }
    covered.iter().filter(|&&c| c).count() as f64 / answer.len() as f64
}

/// Whether `passage` holds `evidence` (both normalised to words: tables, markup and spacing differ).
fn holds(passage: &str, evidence: &[String]) -> bool {
    let p = words(passage);
    !evidence.is_empty() && p.windows(evidence.len()).any(|w| w == evidence)
}

/// Where `evidence` stopped on its way to the model (see [`EvidenceStage`]).
fn evidence_stage(evidence: &[String], retrieval: &Retrieval, a: &Answer, passages: usize) -> EvidenceStage {
    if evidence.is_empty() {
        return EvidenceStage::None;
    }
    if retrieval.refused {
        return EvidenceStage::Refused;
    }
    let whole = |h: &ragbox_core::retrieve::Hit| holds(&h.chunk.text, evidence) || h.section.as_ref().is_some_and(|s| holds(&s.text, evidence));
    let Some(rank) = retrieval.hits.iter().position(whole) else { return EvidenceStage::NotRetrieved };
    if rank >= passages {
        return EvidenceStage::BelowPassages;
    }
    // The model declined: its passages are the closest material.
    let given: Vec<&ragbox_core::answer::Source> = a.served().iter().filter(|s| holds(&s.text, evidence)).collect();
    if given.is_empty() {
        return EvidenceStage::CutByBudget;
    }
    if given.iter().any(|s| s.shown.as_deref().is_none_or(|shown| holds(shown, evidence))) {
        EvidenceStage::Shown
    } else {
        EvidenceStage::DroppedByFocus
    }
}

pub(crate) fn score(collection: &str, q: &QaQuestion, retrieval: &Retrieval, a: &Answer, passages_given: usize, total_ms: f64) -> QaRow {
    let text = strip_markers(&a.answer);
    let answer_words = words(&text);
    let reference_words = q.answer.as_deref().map(words).unwrap_or_default();
    let (f1, recall) = if a.refused { (0.0, 0.0) } else { f1_recall(&answer_words, &reference_words) };
    let evidence = q.evidence.as_deref().map(words).unwrap_or_default();
    let given: Vec<&ragbox_core::answer::Source> = a.sources.iter().filter(|s| holds(&s.text, &evidence)).collect();
    let evidence_cited = !a.refused && a.citations.iter().any(|c| given.iter().any(|s| s.id == c.id && s.chunk == c.chunk));
    let (valid, written) = if a.refused { (0, 0) } else { checked_citations(a) };
    let passages: Vec<Vec<String>> = a.sources.iter().map(|s| words(&s.text)).collect();
    QaRow {
        question: q.question.clone(),
        reference: q.answer.clone(),
        answerable: q.answerable,
        kind: q.kind.clone(),
        answer: a.answer.clone(),
        refusal: a.refusal,
        outcome: a.outcome,
        decision: a.decision.clone(),
        verdict: a.verdict.clone(),
        verdict_log_odds: a.verdict_log_odds,
        fragment: !a.refused && is_fragment(&a.answer),
        f1,
        recall,
        exact: !a.refused && !reference_words.is_empty() && answer_words == reference_words,
        collection: collection.to_string(),
        evidence_stage: evidence_stage(&evidence, retrieval, a, passages_given),
        best_evidence: retrieval.best_evidence,
        best_similarity: retrieval.candidates.iter().filter_map(|c| c.similarity).reduce(f32::max),
        evidence_given: !given.is_empty(),
        evidence_cited,
        citations: [valid, written],
        unsupported: [a.sentences.iter().filter(|s| !s.supported).count(), a.sentences.len()],
        sentences: if a.refused {
            Vec::new()
        } else {
            a.sentences
                .iter()
                .map(|s| SentenceRow {
                    text: s.text.clone(),
                    passages: s.citations.iter().filter_map(|id| a.sources.iter().find(|p| p.id == *id)).map(|p| p.text.clone()).collect(),
                    supported: s.supported,
                    support: s.support,
                })
                .collect()
        },
        copied_share: if a.refused { 0.0 } else { copied_share(&answer_words, &passages, COPY_RUN) },
        hit_token_cap: a.hit_token_cap,
        read: a.served().iter().map(|s| s.shown.clone().unwrap_or_else(|| s.text.clone())).filter(|t| !t.is_empty()).collect(),
        prompt_tokens: a.timings.prompt_tokens,
        first_token_ms: a.timings.first_token_ms,
        total_ms,
    }
}

/// Whether an answer reads as a fragment: it opens with a citation marker, or its last sentence
/// (markers aside) does not end in `.`, `!`, `?`, `…` or `:`.
pub fn is_fragment(answer: &str) -> bool {
    let text = answer.trim();
    let words = strip_markers(text);
    let end = words.trim_end().trim_end_matches(['"', '\'', ')', '*', '”', '’', '`']);
    text.starts_with('[') || !end.ends_with(['.', '!', '?', '…', ':'])
}

/// Runs the plan with `embedder` (the index's model), `generator` and an optional reranker.
/// Without a generator each question's prompt is built and no model is asked: the rows say where
/// the evidence stopped and what the model would have read (`eval --qa --prompts-only`).
pub fn run(
    plan: &QaPlan,
    embedder: Arc<dyn Embedder>,
    generator: Option<Arc<dyn Generator>>,
    reranker: Option<Arc<dyn Reranker>>,
    progress: Progress<'_>,
) -> Result<QaReport> {
    let questions = load(&plan.questions, plan.split.as_deref())?;
    let store = Store::open(&plan.setup.scratch, VectorOptions::default())?;
    let retriever = plan.setup.retriever(&store, &embedder, reranker, progress)?;
    let answerer = generator.as_ref().map(|g| plan.setup.answerer(&retriever, &embedder, g)).transpose()?;
    // Prompts only: the focus the answerer would have used.
    let focus = if answerer.is_some() {
        None
    } else {
        FocusScorer::choose(plan.setup.answer.focus_by, retriever.embedder().cloned(), retriever.reranker().cloned())
    };
    let mut rows = Vec::new();
    for (i, q) in questions.iter().enumerate() {
        let t = std::time::Instant::now();
        let retrieval = retriever.retrieve(&q.question)?;
        let a = match &answerer {
            Some(answerer) => block_on(answerer.answer(&q.question, &q.question, &retrieval, &mut Discard))?,
            None => unasked(&q.question, &q.question, &retrieval, &plan.setup.answer, focus.as_ref(), plan.setup.support)?,
        };
        let row = score(&plan.collection, q, &retrieval, &a, plan.setup.answer.passages, t.elapsed().as_secs_f64() * 1e3);
        progress(&format!(
            "{}/{} {}: F1 {:.2}, evidence {}, {:.1} s",
            i + 1,
            questions.len(),
            if row.refusal.is_some() { "refused" } else { "answered" },
            row.f1,
            if row.evidence_cited { "cited" } else if row.evidence_given { "given, not cited" } else { "not given" },
            row.total_ms / 1e3
        ));
        rows.push(row);
    }
    let model = generator.as_ref().map_or_else(|| "none (prompts only)".to_string(), |g| g.model_id().to_string());
    Ok(summarise(&plan.collection, &model, &plan.setup.answer, rows))
}

/// One report over several collections' reports: every question counted once.
pub fn overall(reports: &[QaReport], options: &AnswerOptions) -> Option<QaReport> {
    let first = reports.first()?;
    let rows = reports.iter().flat_map(|r| r.rows.iter().cloned()).collect();
    Some(summarise("all", &first.model, options, rows))
}

pub(crate) fn summarise(collection: &str, model: &str, options: &AnswerOptions, rows: Vec<QaRow>) -> QaReport {
    let answerable: Vec<&QaRow> = rows.iter().filter(|r| r.answerable).collect();
    let answered: Vec<&QaRow> = rows.iter().filter(|r| r.refusal.is_none()).collect();
    let share = |n: usize, of: usize| if of == 0 { 0.0 } else { n as f64 / of as f64 };
    let mean = |xs: &mut dyn Iterator<Item = f64>, of: usize| if of == 0 { 0.0 } else { xs.sum::<f64>() / of as f64 };
    let n = answerable.len();
    let (valid, written) = answered.iter().fold((0, 0), |(v, w), r| (v + r.citations[0], w + r.citations[1]));
    let (flagged, sentences) = answered.iter().fold((0, 0), |(f, s), r| (f + r.unsupported[0], s + r.unsupported[1]));
    let mut ttft: Vec<f64> = answered.iter().filter(|r| r.first_token_ms > 0.0).map(|r| r.first_token_ms).collect();
    let mut total: Vec<f64> = answered.iter().map(|r| r.total_ms).collect();
    let mut prompt_tokens: Vec<f64> = answered.iter().filter(|r| r.prompt_tokens > 0).map(|r| r.prompt_tokens as f64).collect();
    ttft.sort_by(f64::total_cmp);
    total.sort_by(f64::total_cmp);
    prompt_tokens.sort_by(f64::total_cmp);
    let mut read_chars: Vec<f64> = rows
        .iter()
        .filter(|r| r.refusal != Some(Refusal::NoGoodSource))
        .map(|r| r.read.iter().map(|t| t.chars().count()).sum::<usize>() as f64)
        .collect();
    read_chars.sort_by(f64::total_cmp);
    let unanswerable = rows.len() - n;
    let retrieved = answerable
        .iter()
        .filter(|r| !matches!(r.evidence_stage, EvidenceStage::NotRetrieved | EvidenceStage::Refused | EvidenceStage::None))
        .count();
    let mut evidence_lost = std::collections::BTreeMap::new();
    for r in &answerable {
        let stage = serde_json::to_value(r.evidence_stage).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
        *evidence_lost.entry(stage).or_insert(0) += 1;
    }
    QaReport {
        collection: collection.to_string(),
        model: model.to_string(),
        passages: options.passages,
        passage_chars: options.passage_chars,
        max_tokens: options.max_tokens,
        focus: options.focus,
        prompt_tokens_p50: percentile(&prompt_tokens, 50.0),
        read_chars_p50: percentile(&read_chars, 50.0),
        answerable: n,
        answerable_refused: answerable.iter().filter(|r| r.refusal.is_some()).count(),
        fragments: rows.iter().filter(|r| r.fragment).count(),
        near_misses: rows.iter().filter(|r| r.kind.as_deref() == Some("near-miss")).count(),
        near_misses_refused: rows.iter().filter(|r| r.kind.as_deref() == Some("near-miss") && r.refusal.is_some()).count(),
        f1: mean(&mut answerable.iter().map(|r| r.f1), n),
        recall: mean(&mut answerable.iter().map(|r| r.recall), n),
        exact: share(answerable.iter().filter(|r| r.exact).count(), n),
        reached: share(answerable.iter().filter(|r| r.recall >= 0.5).count(), n),
        evidence_retrieved: share(retrieved, n),
        evidence_shown_of_retrieved: share(answerable.iter().filter(|r| r.evidence_stage == EvidenceStage::Shown).count(), retrieved),
        evidence_lost,
        evidence_given: share(answerable.iter().filter(|r| r.evidence_given).count(), n),
        evidence_cited: share(answerable.iter().filter(|r| r.evidence_cited).count(), n),
        reached_and_cited: share(answerable.iter().filter(|r| r.recall >= 0.5 && r.evidence_cited).count(), n),
        citation_validity: if written == 0 { 1.0 } else { share(valid, written) },
        unsupported_share: share(flagged, sentences),
        copied_share: mean(&mut answered.iter().map(|r| r.copied_share), answered.len()),
        hit_token_cap: share(answered.iter().filter(|r| r.hit_token_cap).count(), answered.len()),
        unanswerable,
        unanswerable_refused: rows.iter().filter(|r| !r.answerable && r.refusal.is_some()).count(),
        first_token_ms: [percentile(&ttft, 50.0), percentile(&ttft, 95.0)],
        total_ms: [percentile(&total, 50.0), percentile(&total, 95.0)],
        rows,
    }
}

/// One markdown table row of the report's headline figures (see [`markdown_header`]).
pub fn markdown_row(r: &QaReport, label: &str) -> String {
    format!(
        "| {label} | {} | {} | {:.0}% | {:.2} | {:.2} | {:.0}% | {:.0}% | {:.0}% | {:.0}% | {:.0}% | {:.0}% | {:.0}% | {:.0}% | {} | {}/{} | {}/{} | {}/{} | {:.0} | {:.1} | {:.1} |\n",
        r.collection,
        r.model,
        r.reached_and_cited * 100.0,
        r.f1,
        r.recall,
        r.evidence_retrieved * 100.0,
        r.evidence_shown_of_retrieved * 100.0,
        r.evidence_cited * 100.0,
        r.citation_validity * 100.0,
        r.unsupported_share * 100.0,
        r.copied_share * 100.0,
        r.hit_token_cap * 100.0,
        r.exact * 100.0,
        r.fragments,
        r.answerable_refused,
        r.answerable,
        r.unanswerable_refused,
        r.unanswerable,
        r.near_misses_refused,
        r.near_misses,
        r.prompt_tokens_p50,
        r.first_token_ms[0] / 1e3,
        r.total_ms[0] / 1e3,
    )
}

/// The header of [`markdown_row`]'s table.
pub fn markdown_header() -> &'static str {
    "| variant | collection | model | reached & cited | F1 | recall | evidence retrieved | read of retrieved | evidence cited | citation validity | unsupported | copied | hit cap | exact | fragments | answerable refused | unanswerable refused | near misses refused | prompt tokens p50 | first token p50 (s) | answer p50 (s) |\n\
     |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(s: &str) -> Vec<String> {
        words(s)
    }

    #[test]
    fn f1_is_squad_token_overlap() {
        assert_eq!(f1_recall(&w("GBP 210"), &w("GBP 210")), (1.0, 1.0));
        let (f1, recall) = f1_recall(&w("The cap is GBP 210 per night."), &w("GBP 210"));
        assert_eq!(recall, 1.0);
        assert!((f1 - 2.0 * (2.0 / 6.0) / (2.0 / 6.0 + 1.0)).abs() < 1e-9, "{f1}");
        assert_eq!(f1_recall(&w("no idea"), &w("GBP 210")), (0.0, 0.0));
        assert_eq!(w("The Policy, an example!"), vec!["policy", "example"]);
    }

    #[test]
    fn copying_is_measured_in_long_verbatim_runs() {
        let passage = w("Submit each expense claim in the ExpensePoint app within 30 days of the last day of the trip.");
        let copied = w("Submit each expense claim in the ExpensePoint app within 30 days of the last day of the trip.");
        assert_eq!(copied_share(&copied, std::slice::from_ref(&passage), COPY_RUN), 1.0);
        let own = w("You have 30 days after the trip ends to submit the claim.");
        assert_eq!(copied_share(&own, std::slice::from_ref(&passage), COPY_RUN), 0.0);
    }

    #[test]
    fn a_half_is_read_by_its_split_and_questions_without_one_are_in_both() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.jsonl");
        let line = |q: &str, split: Option<&str>| {
            serde_json::json!({"question": q, "answer": "x", "file": "f", "evidence": "x", "answerable": true, "split": split}).to_string()
        };
        std::fs::write(&path, [line("a", Some("dev")), line("b", Some("test")), line("c", None)].join("\n")).unwrap();
        let names = |split| load(&path, split).unwrap().into_iter().map(|q| q.question).collect::<Vec<_>>();
        assert_eq!(names(Some("dev")), ["a", "c"]);
        assert_eq!(names(Some("test")), ["b", "c"]);
        assert_eq!(names(None), ["a", "b", "c"]);
        std::fs::write(&path, line("d", Some("train"))).unwrap();
        assert!(load(&path, None).unwrap_err().to_string().contains("neither dev nor test"));
    }

    #[test]
    fn evidence_matches_across_table_markup() {
        assert!(holds("| City | Per diem | Hotel |\n|---|---|---|\n| London  | GBP 65 | GBP 210 |", &w("| London | GBP 65 | GBP 210 |")));
        assert!(!holds("| Paris | EUR 70 | EUR 190 |", &w("| London | GBP 65 | GBP 210 |")));
    }
}
